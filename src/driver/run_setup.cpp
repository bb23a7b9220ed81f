#include "minimllm/driver/run_setup.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "minimllm/core/device.hpp"
#include "minimllm/driver/agreement.hpp"
#include "minimllm/driver/memory_check.hpp"
#include "minimllm/driver/mfu_peak.hpp"
#include "minimllm/driver/provenance.hpp"
#include "minimllm/driver/resolve_cost_model.hpp"
#include "minimllm/driver/run_report.hpp"
#include "minimllm/metrics/cpu_peak.hpp"
#include "minimllm/metrics/output_file.hpp"
#include "minimllm/model/parameter_shards.hpp"
#include "minimllm/planning/policy_registry.hpp"
#include "minimllm/step/memory_estimate.hpp"
#include "minimllm/step/run_step.hpp"

namespace minimllm {

RunSetup::RunSetup(const RunConfig& config, const World& world, const TrainOptions& options,
                   TrainResult& result) {
  std::ostream* log = world.is_root() ? options.log : nullptr;
  grid = model_parallel_of(config);
  // Tensor, pipeline, data and context parallelism (pipeline stages with the colocated placement).
  require_runnable_grid(
      grid,
      policy_row(config.parallel.policy).encoder_ranks() || config.parallel.placement == "disaggregated",
      encoder_schedule_from_string(config.parallel.encoder_schedule));
  // This run's own memory peak, not an earlier run's in the same process (--policy all).
  own_peak = reset_peak_resident();
  start_resident_mib = resident_mib();
  set_blas_threads(config.runtime.blas_threads);
  sampler = std::make_unique<Sampler>(config);
  const GemmPrecision precision = gemm_precision_from_string(config.runtime.precision);
  // Chosen once, for every collective of the run (pool groups, the world's gradient all-reduce and
  // boundary exchange): NCCL on device memory where it can, MPI otherwise. Before the memory check, which
  // counts NCCL's staging for the distributed optimizer.
  const CollectivesChoice collectives = choose_collectives(world.comm, config.runtime.collectives);
  const int per_node =
      config.machine.ranks_per_node > 0 ? config.machine.ranks_per_node : ranks_per_node(world);
  if (!grid.trivial()) validate_model_parallel(grid, world.size, per_node);
  // The fixed tensor-parallel groups and pipeline stages; the planners, the pool, the gradient
  // synchronisation and the metrics work on `data`, the units at this rank's stage and tensor-parallel
  // position (the world itself without model parallelism).
  rank_grid = std::make_unique<RankGrid>(world, grid, config.model.llm.layers, collectives.factory);
  const World& data = rank_grid->data();
  // Memory feasibility (driver/memory_check.hpp), before the model's parameters (and again, with the
  // activations, before the workspace): a deck too large for this machine exits 2 here.
  const MemoryBudget budget = memory_budget(world, config.machine);
  MemoryNeed need;
  const std::size_t parameters = parameter_count(config.model, rank_grid->sharding());
  const int shards = optimizer_shards(config.parallel, data.size);
  const double staging = collective_staging_bytes(parameters, shards, collectives.backend == "nccl");
  need.parameters = static_cast<double>(parameters);
  need.state_bytes = training_state_bytes(parameters, shards) + staging;
  check_memory_fits(config, world, budget, need);
  // A restart's checkpoint is input: one that cannot be read or belongs to another run fails here (exit 2),
  // before any output.
  if (!options.restart_path.empty())
    restart = read_restart_point(options.restart_path, config, world, parameter_count(config.model));
  first_step = restart ? restart->next_step : 0;
  const Recompute recompute = recompute_from_string(config.runtime.recompute);
  model = std::make_unique<Model>(config.model, config.seed, precision, recompute, rank_grid->sharding(),
                                  cp_comm_from_string(config.parallel.cp_comm));
  result.precision = to_string(precision);
  result.recompute = to_string(recompute);
  const PeakChoice peak_choice = choose_peak(config, precision, world);
  result.peak_gflops_per_rank = peak_choice.peak_gflops, result.peak_source = peak_choice.peak_source;
  result.attainable_gflops_per_rank = peak_choice.attainable_gflops;
  result.attainable_source = peak_choice.attainable_source;
  result.planning_gflops_per_rank = peak_choice.planning_gflops;
  result.collectives = collectives.backend;
  result.collectives_reason = collectives.reason;
  // The calibration file is read on every rank: one that only some ranks can read fails them all.
  // A restart plans with what the checkpointed run planned with, so that its plans (and so its losses) are
  // the uninterrupted run's.
  std::exception_ptr error;
  try {
    cost =
        restart
            ? restored_cost_model(
                  config, restart->planning.gflops_per_rank, per_node, restart->planning.calibration_text,
                  "from checkpoint " + restart->path + " (" + restart->planning.cost_model_source + ")")
            : choose_cost_model(config, world, result.planning_gflops_per_rank, per_node, options.cost_model);
  } catch (...) {
    error = std::current_exception();
  }
  agree_on_error(world.comm, error);
  result.cost_model_source = cost.source;
  // The machine (driver/machine.hpp) and the cost model (driver/resolve_cost_model.hpp), as a simulation
  // of this run resolves them; the memory every plan must fit (planning/memory_fit.hpp) the same on every
  // rank. A restart plans with the capacity its run planned with.
  const double capacity = restart ? restart->planning.capacity_bytes : std::max(0.0, budget.planning_bytes);
  result.machine = resolve_machine(
      config.machine, config.machine.empty() ? "none" : config.deck_path,
      {static_cast<double>(per_node),
       config.machine.ranks_per_node > 0 ? "machine section" : "detected: ranks sharing a node (MPI)"},
      {result.planning_gflops_per_rank, peak_choice.planning_source},
      {capacity / (1024.0 * 1024.0 * 1024.0),
       restart ? "from checkpoint " + restart->path : budget.source()});
  cost.model = resolve_cost_model(config, cost, result.machine, world.size);
  cost.model.memory.state += staging;  // NCCL's scratch for the distributed optimizer (0 otherwise)
  layouts = std::make_unique<LayoutSource>(config, data.size, cost.model);
  planner = std::make_unique<StepPlanner>(*sampler, *layouts, data, world);

  // The first kEstimateSteps steps are planned before anything is written (a deck whose layout cannot fit
  // them fails here, InputError, and leaves no output file; a later step that cannot fails when planned);
  // they size the memory estimate and the workspace, and run as planned.
  // Later steps are planned on a helper thread while the step before computes (runtime.plan_ahead).
  plans = std::make_unique<PlanAhead>(*planner, config.steps, config.runtime.plan_ahead);
  const auto check_activations = [&](const PeakWork& peak) {
    need.peak = peak, need.planned = true;
    need.activation_bytes = model->activation_bytes(peak.llm_rows, peak.patches, peak.key_rows);
    check_memory_fits(config, world, budget, need);
  };
  for (int step = first_step; step < std::min(config.steps, first_step + kEstimateSteps); ++step) {
    plans->queue(step);
    // The first step's footprint is a lower bound of the peak: a batch far too large fails after one
    // step's planning, not kEstimateSteps'.
    if (step == first_step)
      check_activations(peak_work({plans->queued().front()}, model->cp_comm(), world.comm));
  }
  const PeakWork peak =
      peak_work({plans->queued().begin(), plans->queued().end()}, model->cp_comm(), world.comm);
  check_activations(peak);
  // runtime.gemm: each of the model's GEMM shape classes on the faster backend, timed at the run's largest
  // micro-batch rows (bounded: the choice, not the figure, is what matters).
  // A restart runs the checkpointed run's choice (the same rounding, so the same losses).
  const GemmChoice gemm_choice =
      restart && !restart->planning.gemm_selection.empty()
          ? decode_gemm_selection(restart->planning.gemm_selection, "from checkpoint " + restart->path)
          : choose_gemm(config.runtime.gemm, model_gemm_classes(config.model),
                        static_cast<int>(std::clamp<std::int64_t>(peak.llm_rows, 64, 2048)), precision,
                        world);
  gemm_scope = std::make_unique<GemmSelectionScope>(gemm_choice.selection);
  result.gemm_backend = gemm_choice.backend;
  result.gemm_choice = gemm_choice.line;
  const CpuDescription cpu = detect_cpu();
  const std::string blas_warning =
      generic_blas_warning(blas_core_name(), blas_config(), cpu.avx512f, cpu.fma, gemm_choice);
  if (!blas_warning.empty()) result.gemm_choice += "\n" + blas_warning;
  const std::string affinity_warning = blas_affinity_warning(
      config.runtime.blas_threads, cores_allowed_to_this_thread(), blas_has_own_thread_pool());
  if (!affinity_warning.empty()) result.gemm_choice += "\n" + affinity_warning;
  model->reserve_workspace(peak.llm_rows, peak.key_rows);
  out = std::make_unique<RunOutput>(options.out_path, options.overwrite, world);
  // No other run may write this run's checkpoint while it runs (rank 0 writes it).
  if (!options.checkpoint_path.empty() && world.is_root()) {
    try {
      checkpoint_lock = std::make_unique<FileLock>(options.checkpoint_path, "checkpoint file");
      if (checkpoint_lock->held()) remove_stale_temporaries(options.checkpoint_path, ".tmp.", "");
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_on_error(world.comm, error);
  pool = std::make_unique<CommPool>(data.comm, config.parallel.comm_pool_capacity, collectives.factory);
  if (config.parallel.comm_precreate == "powers_of_two" && policy_row(config.parallel.policy).planner())
    pool->precreate(power_of_two_blocks(data.size, config.parallel.comm_pool_capacity));
  // ZeRO-1 shards over the gradient communicator: the data world, whatever groups the planners form.
  optimizer = config.parallel.distributed_optimizer
                  ? std::make_unique<AdamW>(*model, config.optimizer, pool->gradients())
                  : std::make_unique<AdamW>(*model, config.optimizer);
  result.optimizer_state_bytes = optimizer->state_bytes();
  if (restart) {
    restore_checkpoint(*restart, *model, *optimizer);
    restart->params = restart->first_moment = restart->second_moment = {};  // on the device now
  }
  planning = restart ? restart->planning
                     : PlanningBasis{result.planning_gflops_per_rank, cost.source, cost.calibration_text,
                                     capacity, encode_gemm_selection(gemm_choice.selection)};
  result.memory_estimate_mib =
      (need.state_bytes + model->activation_bytes(peak.llm_rows, peak.patches, peak.key_rows)) / 1048576.0;
  const std::vector<RunAttribute> provenance = gather_provenance(config, world, options.command_line);
  if (log) print_banner(*log, config, world, *model, result, peak, provenance);
  if (log && restart)
    *log << fmt::format("restart: from {} (the state after {} steps; planned with {})\n", restart->path,
                        first_step, cost.source);
  if (log) log->flush();  // seen at once in a batch job's log (a pipe or file buffers it otherwise)
  try {
    if (*out) {
      out->write_run_attributes(config, result, model->parameter_count(), provenance, cost.calibration_text);
      if (restart)
        out->writer().set_run_attributes(
            {{"restarted_from", restart->path}, {"restart_step", static_cast<long long>(first_step)}});
    }
  } catch (...) {
    error = std::current_exception();
  }
  agree_on_error(world.comm, error);  // rank 0's failure (e.g. a full disk) stops every rank here

  executor = std::make_unique<StepExecutor>(*model, grad_sync_options(config), rank_grid->encoder_groups());
}

}  // namespace minimllm
