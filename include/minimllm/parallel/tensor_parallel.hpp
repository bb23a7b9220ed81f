// Tensor parallelism as Megatron-LM's: a group of ranks splits each transformer block's weights, QKV and
// MLP-in by columns (each rank its heads and its slice of the hidden units), attention-output and MLP-out
// by rows, so a block needs one all-reduce after attention and one after the MLP, forward and backward;
// the token embedding and the LM head are split over the vocabulary (the loss combines each row's
// softmax statistics over the group). Norms and the patch embedding stay whole on every rank. The encoder
// and the LLM have groups of their own (parallel.encoder_tp, parallel.tp): heterogeneous parallelism.
#pragma once

#include "minimllm/parallel/communicator.hpp"
#include "minimllm/parallel/pipeline_parallel.hpp"

namespace minimllm {

// This rank's place in one stack's tensor-parallel group. size 1: the whole stack, no communication.
struct TensorParallel {
  int rank = 0, size = 1;
  Communicator* comm = nullptr;  // the group's all-reduce (non-null when size > 1)
};

struct ModelSharding {
  TensorParallel encoder, llm;  // the encoder's group lies inside the LLM's (encoder_tp divides tp)
  PipelineStage pipeline;       // this rank's LLM layers (parallel/pipeline_parallel.hpp)
};

// One axis of a weight cut over a tensor-parallel group: `parts` equal parts side by side (QKV's columns:
// Q | K | V), each cut into `size` balanced slices; a rank holds slice `rank` of every part, in part order.
struct AxisSlice {
  int full = 0, parts = 1, rank = 0, size = 1;
  int begin(int r) const { return static_cast<int>(static_cast<long long>(full / parts) * r / size); }
  int slice() const { return begin(rank + 1) - begin(rank); }
  int local() const { return parts * slice(); }
  // The whole axis's index of local index l.
  int global(int l) const { return l / slice() * (full / parts) + begin(rank) + l % slice(); }
};

}  // namespace minimllm
