#include "minimllm/planning/cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace minimllm {

// ---------------------------------------------------------------------------------------------------
// Collectives

CollectiveAlgorithm collective_algorithm_from_string(const std::string& name) {
  if (name.empty() || name == "ring") return CollectiveAlgorithm::ring;
  if (name == "tree") return CollectiveAlgorithm::tree;
  throw InputError(fmt::format("collective algorithm '{}': valid: ring, tree", name));
}

const char* to_string(CollectiveAlgorithm algorithm) {
  return algorithm == CollectiveAlgorithm::tree ? "tree" : "ring";
}

double collective_steps(CollectiveAlgorithm algorithm, int n) {
  if (n <= 1) return 0.0;
  if (algorithm == CollectiveAlgorithm::ring) return n - 1.0;
  return std::ceil(std::log2(static_cast<double>(n)) - 1e-12);
}

double all_gather_time(const LinkCost& link, CollectiveAlgorithm algorithm, int n, double bytes) {
  if (n <= 1) return 0.0;
  return collective_steps(algorithm, n) * link.latency + (n - 1.0) / n * bytes / link.bandwidth;
}

double reduce_scatter_time(const LinkCost& link, CollectiveAlgorithm algorithm, int n, double bytes) {
  return all_gather_time(link, algorithm, n, bytes);  // the mirror image: same steps, same bytes
}

double all_reduce_time(const LinkCost& link, CollectiveAlgorithm algorithm, int n, double bytes) {
  return 2.0 * all_gather_time(link, algorithm, n, bytes);  // reduce-scatter, then all-gather
}

double all_to_all_time(const LinkCost& link, int peers, double bytes) {
  if (peers <= 0) return 0.0;
  return peers * link.latency + bytes / link.bandwidth;
}

double Network::all_gather(const GroupSpan& span, double bytes) const {
  if (span.nodes <= 1) return all_gather_time(intra, algorithm, span.ranks, bytes);
  return all_gather_time(inter, algorithm, span.nodes, bytes / span.per_node) +
         all_gather_time(intra, algorithm, span.per_node, bytes);
}

double Network::reduce_scatter(const GroupSpan& span, double bytes) const {
  return all_gather(span, bytes);  // the same two steps in the opposite order
}

double Network::all_reduce(const GroupSpan& span, double bytes) const {
  if (span.nodes <= 1) return all_reduce_time(intra, algorithm, span.ranks, bytes);
  return reduce_scatter_time(intra, algorithm, span.per_node, bytes) +
         all_reduce_time(inter, algorithm, span.nodes, bytes / span.per_node) +
         all_gather_time(intra, algorithm, span.per_node, bytes);
}

// ---------------------------------------------------------------------------------------------------
// CostModel

double CostModel::llm_comm(double s, int g, bool spans) const {
  if (g <= 1) return 0.0;
  const GroupSpan span = packed_span(g, spans);
  const Network net = network();
  const double bytes = kv_row_bytes * s;
  const CpComm mode = cp_comm_for_group(cp_comm, g, cp_heads);
  // The forward's exchange again where recomputation runs it again (recomputed_exchanges).
  const double forwards = 1.0 + recomputed_exchanges(cp_recompute, mode);
  if (mode == CpComm::all_gather)
    return cp_layers * (forwards * net.all_gather(span, bytes) + net.reduce_scatter(span, bytes));
  const LinkCost& hop = point_to_point(span.nodes > 1);
  if (mode == CpComm::a2a) {
    // Two all-to-alls a pass (Q|K|V to the head shards and the output back; dO, then dQ|dK|dV), each
    // member sending (g - 1)/g of its s/g rows' 3 and 1 K-widths: on average a K|V row's bytes each.
    return cp_layers * (2.0 * forwards + 2.0) * all_to_all_time(hop, g - 1, bytes / g * (g - 1.0) / g);
  }
  const double block = bytes / g / hop.bandwidth, exposed = 1.0 - cp_overlap;
  const double forward = (g - 1) * (hop.latency + exposed * block);
  const double backward = (g - 1) * (hop.latency + exposed * 2.0 * block) + hop.latency + block;
  return cp_layers * (forwards * forward + backward);
}

double recomputed_exchanges(Recompute recompute, CpComm mode) {
  if (recompute == Recompute::full) return 1.0;  // the whole block's forward again
  if (recompute == Recompute::none) return 0.0;
  // Selective, the attention core again from what the forward kept: the ring recirculates K|V; a2a returns
  // its head shard's kept output to the rows' owners (the second of the forward's two all-to-alls); the
  // all-gather keeps the group's K|V and exchanges nothing.
  return mode == CpComm::p2p ? 1.0 : mode == CpComm::a2a ? 0.5 : 0.0;
}

double CostModel::llm_time(double s, int g, int first_rank) const {
  return llm_time_spanning(s, g, spans_nodes(first_rank, g));
}

bool CostModel::spans_nodes(int first_rank, int g) const {
  return node_of(first_rank) != node_of(first_rank + std::max(g, 1) - 1);
}

GroupSpan CostModel::span_of(int first_rank, int g) const {
  g = std::max(g, 1);
  const int first = node_of(first_rank), last = node_of(first_rank + g - 1);
  if (first == last) return {g, 1, g};
  // The first and last nodes hold what of the range falls on them; every node between, a whole node. O(1):
  // the world's span is asked for every prediction, at up to millions of virtual ranks.
  const int on_first = (first + 1) * ranks_per_node - first_rank;
  const int on_last = first_rank + g - last * ranks_per_node;
  const int between = last - first > 1 ? ranks_per_node : 0;
  return {g, last - first + 1, std::max({on_first, on_last, between})};
}

GroupSpan CostModel::packed_span(int g, bool spans) const {
  g = std::max(g, 1);
  if (!spans) return {g, 1, g};
  // Larger than a node: from a node boundary (place_groups); else across the boundary of two nodes.
  if (g > ranks_per_node) return span_of(0, g);
  return {g, 2, (g + 1) / 2};
}

double CostModel::grad_sync(int n) const {
  if (n <= 1) return 0.0;
  const Network net{step.allreduce_intra, step.allreduce_inter, algorithm};
  return net.all_reduce(span_of(0, n), step.grad_bytes);  // the world: ranks 0 .. n-1
}

double CostModel::chunk_rows(double tokens, int g) const {
  if (g <= 1 || tokens <= 0.0) return std::max(0.0, tokens);
  // Two of 2g near-equal chunks (rank_work.hpp, load_balanced_chunks): at most 2 ceil(T / 2g) < T / g + 2.
  return std::min(tokens, tokens / g + 2.0);
}

double CostModel::micro_batch_bytes(double tokens, int g) const {
  return per_local_row(g) * chunk_rows(tokens, g) + per_token(g) * tokens;
}

double CostModel::per_local_row(int g) const {
  return memory.per_row + (g > 1 && memory.keys_per_member ? key_row_bytes(g) : 0.0);
}

double CostModel::key_row_bytes(int g) const {
  const bool ring_instead = cp_comm == CpComm::a2a && cp_comm_for_group(cp_comm, g, cp_heads) == CpComm::p2p;
  return ring_instead ? memory.per_key_row_ring : memory.per_key_row;
}

double CostModel::per_token(int g) const { return g > 1 && !memory.keys_per_member ? key_row_bytes(g) : 0.0; }

double CostModel::token_capacity(int g) const {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (!bounded()) return kInf;
  const double free_bytes = capacity_bytes - memory.state - memory.fixed - encoder_reserve_bytes;
  if (free_bytes <= 0.0) return 0.0;
  const double a = per_local_row(g), b = per_token(g);
  if (g <= 1 || a <= 0.0) return a + b > 0.0 ? free_bytes / (a + b) : kInf;
  // micro_batch_bytes(T) = min(a T, a (T / g + 2)) + b T, increasing: the larger of the two branches'
  // solutions.
  const double chunked = (free_bytes - 2.0 * a) / (a / g + b);
  return std::max(chunked, free_bytes / (a + b));
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

LinkCost link_of(const LinkSpec& spec) { return {1e-6 * spec.latency_us, 1e9 * spec.bandwidth_gbs}; }

}  // namespace

CostModel default_cost_model(const RunConfig& config, double gflops, int ranks_per_node) {
  const LlmConfig& m = config.model.llm;
  const double rate = gflops * 1e9;
  const double w = m.width, layers = m.layers, hidden = m.mlp_ratio * w, vocab = m.vocab;

  CostModel cost;
  cost.ranks_per_node = std::max(1, ranks_per_node);
  // LLM: attention costs 12 * width FLOPs per causal pair per layer (forward + backward) and a sample of
  // s tokens has s(s+1)/2 pairs: 6 * width * layers * (s^2 + s). GEMMs are linear in s (blocks + LM head).
  const double attention = 6.0 * w * layers;
  cost.llm.a2 = attention / rate;
  cost.llm.a1 = (layers * block_flops_per_row(w, hidden) + linear_flops(w, vocab) + attention) / rate;
  cost.llm.c = 20e-6;  // launches and packing per sample
  // Each encoder module, per item of p rows: bidirectional attention (p^2 pairs, 12 * width FLOPs each per
  // layer), input embedding (no input gradient: 4 FLOPs per multiply-add), blocks, projector to the LLM
  // width.
  for (const EncoderConfig& e : config.model.encoders) {
    const double ew = e.width, elayers = e.layers, ehidden = e.mlp_ratio * ew;
    const double inputs = e.input_width();
    EncoderCost module;
    module.compute.a2 = 12.0 * ew * elayers / rate;
    module.compute.a1 = (4.0 * inputs * ew + elayers * block_flops_per_row(ew, ehidden) +
                         linear_flops(ew, w) + linear_flops(w, w)) /
                        rate;
    module.compute.c = 10e-6;  // per item
    module.input_bytes_per_row = 4.0 * inputs;
    cost.encoders.push_back(module);
  }

  cost.intra_node = {5e-6, 10e9};
  cost.inter_node = {20e-6, 1e9};
  cost.kv_row_bytes = 2.0 * w * 4.0;  // K|V floats of one token in one layer
  cost.cp_layers = layers;
  cost.cp_heads = config.model.llm.heads;
  cost.cp_comm = cp_comm_from_string(config.parallel.cp_comm);
  cost.boundary_bytes_per_row = 2.0 * w * 4.0;  // embedding row forward, its gradient backward

  cost.step.grad_bytes = 4.0 * parameter_split(config.model).total();  // fp32 gradients
  return cost;
}

ParameterSplit parameter_split(const ModelConfig& model) {
  const LlmConfig& m = model.llm;
  const double w = m.width;
  ParameterSplit split;
  for (const EncoderConfig& e : model.encoders) {
    const double ew = e.width;
    split.encoder +=
        e.input_width() * ew + e.layers * block_params(ew, e.mlp_ratio * ew) + ew + ew * w + w * w;
  }
  split.llm_block = block_params(w, m.mlp_ratio * w);
  split.embedding = static_cast<double>(m.vocab) * w;
  split.head = w + w * m.vocab;
  split.llm_layers = m.layers;
  return split;
}

void apply_machine(CostModel& cost, const MachineConfig& machine) {
  if (machine.intra_node.given()) cost.intra_node = cost.step.allreduce_intra = link_of(machine.intra_node);
  if (machine.inter_node.given()) cost.inter_node = cost.step.allreduce_inter = link_of(machine.inter_node);
  cost.algorithm = collective_algorithm_from_string(machine.collective_algorithm);
  if (machine.comm_creation_ms > 0.0) cost.step.comm_creation = 1e-3 * machine.comm_creation_ms;
  const int domain = machine.nvlink_domain > 0 ? machine.nvlink_domain : machine.ranks_per_node;
  if (domain > 0) cost.ranks_per_node = domain;
  if (machine.cp_overlap >= 0.0) cost.cp_overlap = machine.cp_overlap;
  if (machine.activation_precision == "bf16") cost.kv_row_bytes /= 2.0;
}

const LinkCost& CostModel::point_to_point(bool spans) const {
  const LinkCost& measured = spans ? step.point_to_point_inter : step.point_to_point_intra;
  return measured.bandwidth > 0.0 ? measured : link(spans);
}

const LinkCost& CostModel::tp_allreduce(int n) const {
  return step.tensor_parallel_ranks == n ? step.tensor_parallel_allreduce : step.allreduce_intra;
}

}  // namespace minimllm
