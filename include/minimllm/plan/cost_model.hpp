// CostModel: predicted time of each sample's work per phase on a group of g ranks, communication with a
// bandwidth that depends on group size and on whether the group spans nodes, and memory per rank.
//   compute(s, g) = (a2 s^2 + a1 s + c) / g        s: tokens (LLM) or patches (encoder)
//   comm(s, g)    = 0 for g = 1, else latency(g) + bytes(s, g) / bandwidth(g)
// Coefficients come from calibration on the machine (`minimllm calibrate`) or from defaults derived from
// the model's FLOPs and a nominal rate.
#pragma once

#include <cstdint>
#include <string>

#include "minimllm/config/run_config.hpp"

namespace minimllm {

struct PhaseCost {
  double a2 = 0.0, a1 = 0.0, c = 0.0;  // seconds per token^2, per token, per sample
  double operator()(double s) const { return (a2 * s + a1) * s + c; }
};

struct LinkCost {
  double latency = 0.0;    // seconds per collective
  double bandwidth = 1e9;  // bytes per second per rank
};

struct CostModel {
  PhaseCost encoder, llm;           // compute, on one rank
  LinkCost intra_node, inter_node;  // collectives within a node / spanning nodes
  int ranks_per_node = 1;
  double kv_bytes_per_token = 0.0;  // bytes each rank all-gathers per token per step under context parallelism
  // Memory per rank (bytes): fixed (parameters, gradients, optimizer) + per LLM token held.
  double fixed_bytes = 0.0, bytes_per_token = 0.0, capacity_bytes = 0.0;  // capacity 0: unlimited

  // Time of one sample of s tokens on a group of g ranks (g consecutive ranks starting at first_rank).
  double llm_time(double s, int g, int first_rank = 0) const;
  double encoder_time(double patches) const { return encoder(patches); }
  bool spans_nodes(int first_rank, int g) const;
  // Largest tokens a group of g ranks can hold in one micro-batch (memory), or +inf.
  double token_capacity(int g) const;
};

// Defaults from the model's analytic FLOPs at `gflops` per rank and a nominal network; calibration
// replaces them with measured ones.
CostModel default_cost_model(const RunConfig& config, double gflops, int ranks_per_node);

}  // namespace minimllm
