#include "minimllm/layout/model_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "minimllm/config/input_error.hpp"

namespace minimllm {
namespace {

// "<deck>: " for a message about the grid's keys; "" for a grid not read from a deck.
std::string where(const ModelParallel& grid) { return grid.deck.empty() ? "" : grid.deck + ": "; }

}  // namespace

ModelParallel model_parallel_of(const RunConfig& config) {
  ModelParallel grid;
  grid.tp = config.parallel.tp;
  grid.pp = config.parallel.pp;
  grid.pp_layers = config.parallel.pp_layers;
  grid.encoder_tp = config.parallel.encoder_tp;
  grid.encoder_stage = config.parallel.encoder_stage;
  grid.distributed_optimizer = config.parallel.distributed_optimizer;
  grid.recompute = recompute_from_string(config.runtime.recompute);
  grid.deck = config.deck_path;
  return grid;
}

void validate_model_parallel(const ModelParallel& grid, int ranks, int ranks_per_node) {
  if (ranks_per_node % grid.tp != 0)
    throw InputError(fmt::format(
        "{}parallel.tp = {}: must divide the ranks per node ({}): tensor parallelism stays on the intra-node "
        "link",
        where(grid), grid.tp, ranks_per_node));
  if (ranks % grid.ranks_per_unit() != 0)
    throw InputError(fmt::format("{}parallel.tp x parallel.pp{} = {} x {}{} = {}: must divide the {} ranks",
                                 where(grid), grid.encoder_stage ? " (+ 1: parallel.encoder_stage)" : "",
                                 grid.tp, grid.pp, grid.encoder_stage ? " + 1" : "", grid.ranks_per_unit(),
                                 ranks));
  if (grid.tp % grid.encoder_tp != 0)
    throw InputError(fmt::format(
        "{}parallel.encoder_tp = {}: must divide parallel.tp (= {}): the encoder's tensor-parallel groups "
        "lie "
        "inside a stage's tp ranks, on one node (a unit's pipeline stages are on different nodes)",
        where(grid), grid.encoder_tp, grid.tp));
}

void require_runnable_grid(const ModelParallel& grid, bool disaggregated, EncoderSchedule schedule) {
  if (schedule == EncoderSchedule::per_micro_batch && (grid.pp > 1 || grid.encoder_stage))
    throw InputError(fmt::format(
        "{}parallel.encoder_schedule = per_micro_batch: runs take it without pipeline stages only "
        "(parallel.pp "
        "= {}, parallel.encoder_stage = {}), whose schedules run the encoder once a step; simulate projects "
        "it on any grid",
        where(grid), grid.pp, grid.encoder_stage));
  if (!disaggregated) return;
  if (grid.pp > 1)
    throw InputError(fmt::format(
        "{}parallel.pp = {}: pipeline stages run with the colocated placement only (every stage's ranks run "
        "the same plan); use a colocated policy (static, megatron_dcp, naive, orch, dhp, dhp_search, flexsp)",
        where(grid), grid.pp));
  if (grid.encoder_stage)
    throw InputError(
        where(grid) +
        "parallel.encoder_stage = true: the disaggregated placement (policy disagg, "
        "parallel.placement: disaggregated) puts the encoder on ranks of its own already; use one or "
        "the other");
}

std::vector<int> stage_layer_counts(int layers, int stages, const std::vector<int>& listed) {
  if (!listed.empty()) return listed;
  std::vector<int> counts;
  for (int s = 0; s < stages; ++s)
    counts.push_back(static_cast<int>((static_cast<long long>(layers) * (s + 1)) / stages -
                                      (static_cast<long long>(layers) * s) / stages));
  return counts;
}
}  // namespace minimllm
