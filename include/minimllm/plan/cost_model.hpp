// CostModel: predicted time of each sample's work per phase on a group of g ranks, communication with a
// bandwidth that depends on group size and on whether the group spans nodes, and memory per rank.
//   compute(s, g) = (a2 s^2 + a1 s + c) / g        s: tokens (LLM) or patches of one image (encoder)
//   comm(s, g)    = 0 for g = 1, else collectives * latency + kv_bytes_per_token * s * (g-1)/g / bandwidth
// The encoder attends within each image, so its cost is per image (a sample with several images costs
// the sum over its images); the LLM cost is per sample (one fused causal sequence).
// Per-step terms outside those phases (StepCost) complete a step's time: generating and packing each
// rank's inputs, the gradient all-reduce and the optimizer (predict_step, plan/step_prediction.hpp).
// Coefficients come from calibration on the machine (`minimllm calibrate`, plan/calibration.hpp) or from
// defaults derived from the model's FLOPs and a nominal rate.
#pragma once

#include <cstdint>
#include <string>

#include "minimllm/config/run_config.hpp"

namespace minimllm {

struct PhaseCost {
  double a2 = 0.0, a1 = 0.0, c = 0.0;  // seconds per token^2, per token, per sample (encoder: per image)
  double operator()(double s) const { return (a2 * s + a1) * s + c; }
};

struct LinkCost {
  double latency = 0.0;    // seconds per collective
  double bandwidth = 1e9;  // bytes per second per rank
};

// Per-step terms outside the encoder, boundary and LLM phases.
struct StepCost {
  // Generating and packing one rank's inputs:
  //   data_c + data_per_image * images + data_per_patch * patches + data_per_token * rows.
  double data_c = 0.0, data_per_image = 0.0, data_per_patch = 0.0, data_per_token = 0.0;
  double optimizer = 0.0;   // one AdamW step over every parameter (every rank, the same)
  double grad_bytes = 0.0;  // the gradient buffer, all-reduced over the world every step
  // All-reduce: latency + 2(N-1)/N * bytes / bandwidth, within a node / spanning nodes.
  LinkCost allreduce_intra{5e-6, 10e9}, allreduce_inter{20e-6, 1e9};
  // Gradient all-reduce over n ranks (0 for one rank), spanning nodes when n > ranks_per_node.
  double grad_sync(int n, int ranks_per_node) const;
};

struct CostModel {
  PhaseCost encoder, llm;           // compute, on one rank
  LinkCost intra_node, inter_node;  // collectives within a node / spanning nodes
  int ranks_per_node = 1;
  // Bytes each rank all-gathers (and reduce-scatters back) per token per step under context parallelism.
  double kv_bytes_per_token = 0.0;
  double collectives_per_sample = 1.0;    // context-parallel collectives per sample (2 per LLM layer)
  double boundary_bytes_per_patch = 0.0;  // encoder output row forward + its gradient backward
  // A sample's raw inputs as its loader holds them: int32 token ids, fp32 pixels (plan_traffic.hpp).
  double input_bytes_per_token = 4.0, input_bytes_per_patch = 0.0;
  // Memory per rank (bytes): fixed (parameters, gradients, optimizer) + per LLM token held (its share,
  // tokens / g) + the gathered K|V every member holds for all tokens of the micro-batch (g > 1 only).
  double fixed_bytes = 0.0, bytes_per_token = 0.0, capacity_bytes = 0.0;  // capacity 0: unlimited
  double gathered_bytes_per_token = 0.0;
  StepCost step;  // data, gradient all-reduce, optimizer

  // Time of one sample of s tokens on a group of g ranks (g consecutive ranks starting at first_rank).
  double llm_time(double s, int g, int first_rank = 0) const;
  // The same for a group whose ranks do (spans = true) or do not span nodes.
  double llm_time_spanning(double s, int g, bool spans) const { return llm(s) / g + llm_comm(s, g, spans); }
  // Context-parallel communication of one sample on g ranks (0 for g = 1).
  double llm_comm(double s, int g, bool spans) const;
  double encoder_time(double patches) const { return encoder(patches); }  // one image
  const LinkCost& link(bool spans) const { return spans ? inter_node : intra_node; }
  int node_of(int rank) const { return rank / ranks_per_node; }
  bool spans_nodes(int first_rank, int g) const;
  // Largest tokens a group of g ranks can hold in one micro-batch (memory), or +inf.
  double token_capacity(int g) const;
};

// Defaults from the model's analytic FLOPs at `gflops` per rank and a nominal network (10 GB/s and
// 5 us within a node, 1 GB/s and 20 us across nodes); calibration replaces them with measured ones.
// Uncalibrated, the step terms hold only the gradient all-reduce on the nominal links (data and optimizer
// are not modelled: 0).
// capacity_bytes: memory per rank, 0 = unlimited.
CostModel default_cost_model(const RunConfig& config, double gflops, int ranks_per_node,
                             double capacity_bytes = 0.0);

}  // namespace minimllm
