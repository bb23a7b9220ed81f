#include "minimllm/driver/resolve_cost_model.hpp"

#include "minimllm/kernels/gemm.hpp"
#include "minimllm/layout/model_parallel.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/model/parameter_shards.hpp"
#include "minimllm/planning/unit_cost_model.hpp"

namespace minimllm {

CostModel resolve_cost_model(const RunConfig& config, const CostModelChoice& choice, ResolvedMachine& machine,
                             int ranks) {
  CostModel cost = choice.model;
  apply_machine(cost, machine.machine);
  // The distributed optimizer shards over the data-parallel units (unit_cost_model's own state term
  // replaces this one under a tensor x pipeline grid).
  const ModelParallel grid = model_parallel_of(config);
  cost.memory = memory_model(config.model, gemm_precision_from_string(config.runtime.precision),
                             recompute_from_string(config.runtime.recompute),
                             optimizer_shards(config.parallel, ranks / grid.ranks_per_unit()),
                             cp_comm_from_string(config.parallel.cp_comm));
  cost.capacity_bytes = machine.memory_bytes();
  cost.capacity_source = machine.memory_source;
  resolve_links(machine, cost, choice.intra_measured, choice.inter_measured, choice.source,
                choice.creation_measured);
  if (!grid.trivial()) cost = unit_cost_model(cost, config, grid, ranks);
  return cost;
}

}  // namespace minimllm
