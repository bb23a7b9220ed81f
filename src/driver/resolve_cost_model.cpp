#include "minimllm/driver/resolve_cost_model.hpp"

#include <fmt/format.h>

#include "minimllm/kernels/gemm.hpp"
#include "minimllm/layout/model_parallel.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/model/parameter_shards.hpp"
#include "minimllm/planning/gemm_shapes.hpp"
#include "minimllm/planning/unit_cost_model.hpp"

namespace minimllm {
namespace {

// The GEMM shapes' effect on the compute terms: a calibration's measured rates against themselves (its
// terms were measured at whole shapes), else machine.gemm against the peak the FLOP-based terms assume.
void price_gemm_shapes(CostModel& cost, const RunConfig& config, const CostModelChoice& choice,
                       ResolvedMachine& machine, const ModelParallel& grid, int ranks) {
  const bool calibrated = !choice.calibration_text.empty();
  GemmRates rates, reference;
  if (calibrated && !choice.gemm_rates.empty()) {
    rates = reference = GemmRates::measured(choice.gemm_rates);
  } else if (!calibrated && machine.machine.gemm.given() && machine.machine.peak_gflops > 0.0) {
    rates = GemmRates::roofline(machine.machine.peak_gflops, machine.machine.gemm);
    reference = GemmRates::at_peak(machine.machine.peak_gflops);
  } else {
    return;
  }
  const GemmShapeEffect e = apply_gemm_shapes(cost, config, grid, ranks, rates, reference);
  std::string modules;
  for (size_t m = 0; m < e.encoder_factors.size(); ++m)
    modules += fmt::format("; {} encoder x{:.3f} (encoder_tp {}, {:.0f} rows a call)",
                           to_string(config.model.encoders[m].modality), e.encoder_factors[m],
                           grid.encoder_tp, e.rows.encoders[m]);
  machine.gemm_shapes = fmt::format("{}; LLM GEMMs x{:.3f} the FLOP time (tp {}, {:.0f} rows a call){}",
                                    e.source, e.llm_factor, grid.tp, e.rows.llm, modules);
}

}  // namespace

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
  cost.memory.encoder_per_stage =
      encoder_schedule_from_string(config.parallel.encoder_schedule) == EncoderSchedule::per_micro_batch;
  cost.capacity_bytes = machine.memory_bytes();
  cost.capacity_source = machine.memory_source;
  resolve_links(machine, cost, choice.intra_measured, choice.inter_measured, choice.source,
                choice.creation_measured);
  price_gemm_shapes(cost, config, choice, machine, grid, ranks);
  if (!grid.trivial()) cost = unit_cost_model(cost, config, grid, ranks);
  return cost;
}

}  // namespace minimllm
