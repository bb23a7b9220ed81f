#include "minimllm/planning/unit_cost_model.hpp"

#include <algorithm>
#include <cmath>

#include "minimllm/data/sampler.hpp"

namespace minimllm {
namespace {

// A forward is a third of a forward and backward's FLOPs (the backward computes two gradients per GEMM).
constexpr double kForwardShare = 1.0 / 3.0;

// Seconds per token (bandwidth) and per pass (latency) of `all_reduces` all-reduces of `row_bytes` per
// token among n ranks of one node, on the all-reduce's intra-node link (what `minimllm calibrate` measures
// for the gradient all-reduce; the machine's intra-node link otherwise).
struct TensorParallelTraffic {
  double per_token = 0.0, per_pass = 0.0;
};

TensorParallelTraffic tensor_parallel_traffic(const CostModel& cost, int n, double all_reduces,
                                              double row_bytes) {
  if (n <= 1) return {};
  const LinkCost& link = cost.tp_allreduce(n);
  const double latency = all_reduce_time(link, cost.algorithm, n, 0.0);
  return {all_reduces * (all_reduce_time(link, cost.algorithm, n, row_bytes) - latency),
          all_reduces * latency};
}

}  // namespace

double parameters_per_rank(const ModelConfig& model, const ModelParallel& grid) {
  const ParameterSplit split = parameter_split(model);
  // The fullest LLM stage: the first holds the embedding, the last the head (one stage both when pp = 1).
  const std::vector<int> layers = stage_layer_counts(split.llm_layers, grid.pp, grid.pp_layers);
  double fullest = 0.0;
  for (int s = 0; s < grid.pp; ++s)
    fullest = std::max(fullest, layers[s] * split.llm_block + (s == 0 ? split.embedding : 0.0) +
                                    (s + 1 == grid.pp ? split.head : 0.0));
  const double llm = fullest / grid.tp, encoder = split.encoder / grid.encoder_tp;
  // The encoder's own stage holds it apart from the LLM's stages: the fuller of the two.
  return grid.encoder_stage ? std::max(llm, encoder) : llm + encoder;
}

CostModel unit_cost_model(const CostModel& rank, const RunConfig& config, const ModelParallel& grid,
                          int ranks) {
  validate_model_parallel(grid, ranks, rank.ranks_per_node);
  const ModelConfig& model = config.model;
  const int tp = grid.tp, pp = grid.pp, per_unit = grid.ranks_per_unit(), etp = grid.encoder_tp;
  const int units = ranks / per_unit;
  CostModel unit = rank;
  unit.ranks_per_node = rank.ranks_per_node / tp;
  unit.pipeline_stages = pp;

  // The fullest stage's layers set the pipeline's pace.
  const std::vector<int> layers = stage_layer_counts(model.llm.layers, pp, grid.pp_layers);
  const double stage_layers = *std::max_element(layers.begin(), layers.end());
  const double stage_share = stage_layers / model.llm.layers;
  // Compute: the recomputed forward, then the work spread over the stage's tp ranks (the LLM) or over the
  // tp ranks of the stage holding the encoder (its groups share the unit's images); a sample's fixed
  // overhead (launches) per stage, not shared by tp, an image's on its group.
  const bool full = grid.recompute == Recompute::full;
  const double linear = full ? 1.0 + kForwardShare : 1.0;
  const double quadratic = grid.recompute == Recompute::none ? 1.0 : 1.0 + kForwardShare;
  unit.llm.a2 *= quadratic * stage_share / tp;
  unit.llm.a1 *= linear * stage_share / tp;
  unit.llm.c *= stage_share;
  // The encoder's ranks: the tp ranks of the LLM's first stage, or of its own stage (parallel.encoder_stage:
  // the encoder runs there before the LLM's stages, which wait for it as it waits for their gradients).
  const int encoder_ranks = tp;
  // Tensor-parallel all-reduces: the LLM's per stage, each encoder module's per row.
  const double passes = full ? 6.0 : 4.0;
  const TensorParallelTraffic llm_tp =
      tensor_parallel_traffic(rank, tp, passes * stage_layers, 4.0 * model.llm.width);
  unit.llm.a1 += llm_tp.per_token;
  unit.llm.c += llm_tp.per_pass;  // per sample: an upper bound where a micro-batch packs several
  for (size_t m = 0; m < unit.encoders.size(); ++m) {
    PhaseCost& encoder = unit.encoders[m].compute;
    encoder.a2 *= quadratic / encoder_ranks;
    encoder.a1 *= linear / encoder_ranks;
    encoder.c *= static_cast<double>(etp) / encoder_ranks;
    const EncoderConfig& module = model.encoders[m];
    const TensorParallelTraffic encoder_tp =
        tensor_parallel_traffic(rank, etp, passes * module.layers, 4.0 * module.width);
    // A unit's tp / encoder_tp encoder groups share its items: each group's traffic, spread.
    encoder.a1 += encoder_tp.per_token * etp / encoder_ranks;
    encoder.c += encoder_tp.per_pass * etp / encoder_ranks;
  }
  // Pipeline stages: per micro-batch each stage receives its rows' activations and sends their gradients
  // back (width x 4 bytes a row each way, every tensor-parallel rank its own copy), on the link between
  // stages: another node's once a stage's ranks fill a node. Per sample: an upper bound, as above.
  if (pp > 1) {
    const bool spans = ranks / grid.unit_stages() >= rank.ranks_per_node;
    const LinkCost& link = rank.point_to_point(spans);
    unit.llm.a1 += 2.0 * 4.0 * model.llm.width / link.bandwidth;
    unit.llm.c += 2.0 * link.latency;
  }
  // The encoder's own stage: the unit's image rows go to the LLM's first stage and their gradients come
  // back, one more hop (per patch, every tensor-parallel rank its copy), before and after the LLM's work.
  if (grid.encoder_stage) {
    const bool spans = ranks / grid.unit_stages() >= rank.ranks_per_node;
    for (EncoderCost& module : unit.encoders) {
      module.compute.a1 += 2.0 * 4.0 * model.llm.width / rank.point_to_point(spans).bandwidth;
      module.compute.c += 2.0 * rank.point_to_point(spans).latency;
    }
  }
  // Context parallelism: each rank's heads, its stage's layers; recomputation repeats the forward's
  // exchange as its mechanism needs (CostModel::cp_recompute).
  unit.kv_row_bytes = rank.kv_row_bytes / tp;
  unit.cp_layers = rank.cp_layers * stage_share;
  unit.cp_recompute = grid.recompute;
  unit.cp_heads = rank.cp_heads / tp;
  // The encoder's output rows reach the first stage's tp ranks, a share each.
  unit.boundary_bytes_per_row = rank.boundary_bytes_per_row / tp;

  // Memory per rank.
  const double parameters = parameters_per_rank(model, grid);
  unit.memory.state = training_state_bytes(static_cast<std::size_t>(std::llround(parameters)),
                                           grid.distributed_optimizer ? units : 1);
  unit.memory.fixed = rank.memory.fixed / tp;
  unit.memory.per_row = rank.memory.per_row / tp;
  unit.memory.per_key_row = rank.memory.per_key_row / tp;
  unit.memory.per_key_row_ring = rank.memory.per_key_row_ring / tp;
  // A unit's items spread over its encoder groups, an item's activations over its group's encoder_tp
  // ranks: per row / tp on average, and one largest item's worth more where there is more than one group
  // (an item is never split between groups, so their shares can be uneven by one item).
  double largest_item = 0.0;
  for (size_t m = 0; m < unit.memory.per_encoder_row.size(); ++m) {
    unit.memory.per_encoder_row[m] = rank.memory.per_encoder_row[m] / encoder_ranks;
    const double rows = largest_item_rows(config, static_cast<int>(m));
    largest_item = std::max(largest_item, rank.memory.per_encoder_row[m] * rows / etp);
  }
  unit.memory.encoder_apart = grid.encoder_stage;
  if (encoder_ranks > etp) unit.memory.fixed += largest_item;

  // Step terms: a rank's gradients over the units; its optimizer update.
  const double share = parameters / parameter_split(model).total();
  unit.step.grad_bytes = rank.step.grad_bytes * share;
  unit.step.optimizer = rank.step.optimizer * share / (grid.distributed_optimizer ? units : 1);
  return unit;
}

}  // namespace minimllm
