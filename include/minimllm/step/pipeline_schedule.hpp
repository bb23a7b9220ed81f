// The 1F1B schedule (PipeDream-Flush, Megatron-LM's default): stage s of p first runs the forwards of
// min(p - s - 1, m) micro-batches (the warm-up), then alternates one forward and one backward, then runs
// the remaining backwards. At most p - s micro-batches' activations are alive at once on stage s, and an
// ideal pipeline of equal micro-batches idles (p - 1) / (m + p - 1) of its time (the bubble).
//
// Every member of a context-parallel group runs the same micro-batches (a rank is in one LLM group per
// step), so the group's collectives happen in the same order on each of them: no schedule deadlocks.
#pragma once

#include <vector>

namespace minimllm {

struct PipelineOp {
  bool forward = true;
  int micro_batch = 0;
};

// The order stage `stage` of `stages` runs the forwards and backwards of `micro_batches` micro-batches.
std::vector<PipelineOp> one_f_one_b(int stage, int stages, int micro_batches);

// The ideal 1F1B bubble, (p - 1) / (m + p - 1): the fraction of a stage's pipeline time it idles when
// every micro-batch takes the same time on every stage and transfers take none. 0 without micro-batches.
double ideal_bubble(int stages, int micro_batches);

}  // namespace minimllm
