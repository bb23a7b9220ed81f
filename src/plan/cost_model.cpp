#include "minimllm/plan/cost_model.hpp"

#include <algorithm>
#include <limits>

namespace minimllm {

double StepCost::grad_sync(int n, int ranks_per_node) const {
  if (n <= 1) return 0.0;
  const LinkCost& l = n > ranks_per_node ? allreduce_inter : allreduce_intra;
  return l.latency + 2.0 * (n - 1.0) / n * grad_bytes / l.bandwidth;
}

double CostModel::llm_comm(double s, int g, bool spans) const {
  if (g <= 1) return 0.0;
  const LinkCost& l = link(spans);
  // An all-gather moves the (g-1)/g of the rows a rank does not hold; the reduce-scatter mirrors it.
  return collectives_per_sample * l.latency + kv_bytes_per_token * s * (g - 1.0) / g / l.bandwidth;
}

double CostModel::llm_time(double s, int g, int first_rank) const {
  return llm_time_spanning(s, g, spans_nodes(first_rank, g));
}

bool CostModel::spans_nodes(int first_rank, int g) const {
  return node_of(first_rank) != node_of(first_rank + std::max(g, 1) - 1);
}

double CostModel::token_capacity(int g) const {
  if (capacity_bytes <= 0.0) return std::numeric_limits<double>::infinity();
  const double free_bytes = capacity_bytes - fixed_bytes;
  if (free_bytes <= 0.0) return 0.0;
  const double per_token = bytes_per_token / g + (g > 1 ? gathered_bytes_per_token : 0.0);
  return per_token > 0.0 ? free_bytes / per_token : std::numeric_limits<double>::infinity();
}

namespace {

// FLOPs per row of a linear layer: 2 per multiply-add forward, 4 backward (input and weight gradients).
double linear_flops(double in, double out) { return 6.0 * in * out; }

// GEMM FLOPs per row of one pre-norm block (QKV, attention output, MLP in and out), forward + backward.
double block_flops_per_row(double width, double hidden) {
  return linear_flops(width, 3 * width) + linear_flops(width, width) + linear_flops(width, hidden) +
         linear_flops(hidden, width);
}

double block_params(double width, double hidden) {
  return 4 * width * width + 2 * width * hidden + 2 * width;
}

}  // namespace

CostModel default_cost_model(const RunConfig& config, double gflops, int ranks_per_node,
                             double capacity_bytes) {
  const EncoderConfig& e = config.model.encoder;
  const LlmConfig& m = config.model.llm;
  const double rate = gflops * 1e9;
  const double w = m.width, layers = m.layers, hidden = m.mlp_ratio * w, vocab = m.vocab;
  const double ew = e.width, elayers = e.layers, ehidden = e.mlp_ratio * ew;
  const double pixels = static_cast<double>(e.channels) * e.patch * e.patch;

  CostModel cost;
  cost.ranks_per_node = std::max(1, ranks_per_node);
  // LLM: attention costs 12 * width FLOPs per causal pair per layer (forward + backward) and a sample of
  // s tokens has s(s+1)/2 pairs: 6 * width * layers * (s^2 + s). GEMMs are linear in s (blocks + LM head).
  const double attention = 6.0 * w * layers;
  cost.llm.a2 = attention / rate;
  cost.llm.a1 = (layers * block_flops_per_row(w, hidden) + linear_flops(w, vocab) + attention) / rate;
  cost.llm.c = 20e-6;  // launches and packing per sample
  // Encoder, per image of p patches: bidirectional attention (p^2 pairs, 12 * width FLOPs each per layer),
  // patch embedding (no pixel gradient: 4 FLOPs per multiply-add), blocks, projector to the LLM width.
  cost.encoder.a2 = 12.0 * ew * elayers / rate;
  cost.encoder.a1 = (4.0 * pixels * ew + elayers * block_flops_per_row(ew, ehidden) + linear_flops(ew, w) +
                     linear_flops(w, w)) /
                    rate;
  cost.encoder.c = 10e-6;  // per image

  cost.intra_node = {5e-6, 10e9};
  cost.inter_node = {20e-6, 1e9};
  cost.kv_bytes_per_token = 2.0 * w * 4.0 * layers * 2.0;  // K|V floats per layer, gather + reduce-scatter
  cost.collectives_per_sample = 2.0 * layers;
  cost.boundary_bytes_per_patch = 2.0 * w * 4.0;  // embedding row forward, its gradient backward
  cost.input_bytes_per_patch = 4.0 * pixels;

  const double params = pixels * ew + elayers * block_params(ew, ehidden) + ew + ew * w + w * w +  // encoder
                        vocab * w + layers * block_params(w, hidden) + w + w * vocab;              // LLM
  cost.step.grad_bytes = 4.0 * params;  // fp32 gradients
  cost.fixed_bytes = 16.0 * params;     // parameters, gradients, two Adam moments (fp32)
  cost.bytes_per_token = (16.0 * w + 2.0 * hidden) * 4.0 * layers + vocab * 4.0;
  cost.gathered_bytes_per_token = (layers + 1.0) * 2.0 * w * 4.0;
  cost.capacity_bytes = capacity_bytes;
  return cost;
}

}  // namespace minimllm
