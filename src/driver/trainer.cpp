#include "minimllm/driver/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "minimllm/core/clock.hpp"
#include "minimllm/core/device.hpp"
#include "minimllm/core/phase.hpp"
#include "minimllm/core/stop_request.hpp"
#include "minimllm/core/watchdog.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/agreement.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/driver/checkpoint.hpp"
#include "minimllm/driver/gemm_choice.hpp"
#include "minimllm/driver/memory_check.hpp"
#include "minimllm/driver/mfu_peak.hpp"
#include "minimllm/driver/provenance.hpp"
#include "minimllm/driver/run_output.hpp"
#include "minimllm/driver/run_report.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/metrics/cpu_peak.hpp"
#include "minimllm/metrics/file_lock.hpp"
#include "minimllm/metrics/output_file.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/model/parameter_shards.hpp"
#include "minimllm/parallel/comm_pool.hpp"
#include "minimllm/parallel/rank_grid.hpp"
#include "minimllm/plan/layout_source.hpp"
#include "minimllm/plan/model_parallel.hpp"
#include "minimllm/step/finite_check.hpp"
#include "minimllm/step/memory_estimate.hpp"
#include "minimllm/step/optimizer.hpp"
#include "minimllm/step/plan_ahead.hpp"
#include "minimllm/step/planned_step.hpp"
#include "minimllm/step/run_step.hpp"
#include "minimllm/step/step_metrics.hpp"

namespace minimllm {

TrainResult train(const RunConfig& config, const World& world, const TrainOptions& options) {
  std::ostream* log = world.is_root() ? options.log : nullptr;
  const ModelParallel grid = model_parallel_of(config);
  // Tensor, pipeline, data and context parallelism (pipeline stages with the colocated placement).
  require_runnable_grid(grid,
                        config.parallel.policy == "disagg" || config.parallel.placement == "disaggregated");
  // This run's own memory peak, not an earlier run's in the same process (--policy all).
  const bool own_peak = reset_peak_resident();
  double start_resident = resident_mib();
  set_blas_threads(config.runtime.blas_threads);
  const Sampler sampler(config);
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
  const RankGrid rank_grid(world, grid, config.model.llm.layers, collectives.factory);
  const World& data = rank_grid.data();
  // Memory feasibility (driver/memory_check.hpp), before the model's parameters (and again, with the
  // activations, before the workspace): a deck too large for this machine exits 2 here.
  const MemoryBudget budget = memory_budget(world, config.machine);
  MemoryNeed need;
  const std::size_t parameters = parameter_count(config.model, rank_grid.sharding());
  const int shards = optimizer_shards(config.parallel, data.size);
  const double staging = collective_staging_bytes(parameters, shards, collectives.backend == "nccl");
  need.parameters = static_cast<double>(parameters);
  need.state_bytes = training_state_bytes(parameters, shards) + staging;
  check_memory_fits(config, world, budget, need);
  // A restart's checkpoint is input: one that cannot be read or belongs to another run fails here (exit 2),
  // before any output.
  std::optional<RestartPoint> restart;
  if (!options.restart_path.empty())
    restart = read_restart_point(options.restart_path, config, world, parameter_count(config.model));
  const int first_step = restart ? restart->next_step : 0;
  const Recompute recompute = recompute_from_string(config.runtime.recompute);
  Model model(config.model, config.seed, precision, recompute, rank_grid.sharding());
  TrainResult result;
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
  CostModelChoice cost;
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
  // The machine (driver/machine.hpp): its NVLink domain and links, and the memory every plan must fit
  // (plan/memory_fit.hpp), the same on every rank. A restart plans with the capacity its run planned with.
  ResolvedMachine& machine = result.machine;
  machine.machine = config.machine;
  machine.section = config.machine.empty() ? "none" : config.deck_path;
  machine.machine.ranks_per_node = per_node;
  machine.ranks_per_node_source =
      config.machine.ranks_per_node > 0 ? "machine section" : "detected: ranks sharing a node (MPI)";
  machine.machine.nvlink_domain = config.machine.nvlink_domain > 0 ? config.machine.nvlink_domain : per_node;
  machine.nvlink_domain_source = config.machine.nvlink_domain > 0 ? "machine section" : "ranks_per_node";
  machine.machine.peak_gflops = result.planning_gflops_per_rank;  // the cost model's compute rate
  machine.peak_source = peak_choice.planning_source;
  const double capacity = restart ? restart->planning.capacity_bytes : std::max(0.0, budget.planning_bytes);
  machine.machine.memory_gib = capacity / (1024.0 * 1024.0 * 1024.0);
  machine.memory_source = restart ? "from checkpoint " + restart->path : budget.source();
  apply_machine(cost.model, machine.machine);
  cost.model.memory = memory_model(config.model, precision, recompute, shards);
  cost.model.capacity_bytes = capacity;
  cost.model.capacity_source = machine.memory_source;
  resolve_links(machine, cost.model, cost.intra_measured, cost.inter_measured, cost.source,
                cost.creation_measured);
  // The grid's terms: the units' compute and traffic under tensor and pipeline parallelism, the
  // distributed optimizer's and recomputation's (plan/model_parallel.hpp).
  if (!grid.trivial()) cost.model = unit_cost_model(cost.model, config, grid, world.size);
  cost.model.memory.state += staging;  // NCCL's scratch for the distributed optimizer (0 otherwise)
  const LayoutSource layouts(config, data.size, cost.model);
  const StepPlanner planner(sampler, layouts, data, world, model.linear_weight_in_attention_pairs());

  // The first kEstimateSteps steps are planned before anything is written (a deck whose layout cannot fit
  // them fails here, InputError, and leaves no output file; a later step that cannot fails when planned);
  // they size the memory estimate and the workspace, and run as planned.
  // Later steps are planned on a helper thread while the step before computes (runtime.plan_ahead).
  PlanAhead plans(planner, config.steps, config.runtime.plan_ahead);
  const auto check_activations = [&](const PeakWork& peak) {
    need.peak = peak, need.planned = true;
    need.activation_bytes = model.activation_bytes(peak.llm_rows, peak.patches, peak.key_rows);
    check_memory_fits(config, world, budget, need);
  };
  for (int step = first_step; step < std::min(config.steps, first_step + kEstimateSteps); ++step) {
    plans.queue(step);
    // The first step's footprint is a lower bound of the peak: a batch far too large fails after one
    // step's planning, not kEstimateSteps'.
    if (step == first_step) check_activations(peak_work({plans.queued().front()}, world.comm));
  }
  const PeakWork peak = peak_work({plans.queued().begin(), plans.queued().end()}, world.comm);
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
  const GemmSelectionScope gemm_scope(gemm_choice.selection);
  result.gemm_backend = gemm_choice.backend;
  result.gemm_choice = gemm_choice.line;
  const CpuDescription cpu = detect_cpu();
  const std::string blas_warning =
      generic_blas_warning(blas_core_name(), blas_config(), cpu.avx512f, cpu.fma, gemm_choice);
  if (!blas_warning.empty()) result.gemm_choice += "\n" + blas_warning;
  const std::string affinity_warning = blas_affinity_warning(
      config.runtime.blas_threads, cores_allowed_to_this_thread(), blas_has_own_thread_pool());
  if (!affinity_warning.empty()) result.gemm_choice += "\n" + affinity_warning;
  model.reserve_workspace(peak.llm_rows, peak.key_rows);
  RunOutput out(options.out_path, options.overwrite, world);
  // No other run may write this run's checkpoint while it runs (rank 0 writes it).
  std::unique_ptr<FileLock> checkpoint_lock;
  if (!options.checkpoint_path.empty() && world.is_root()) {
    try {
      checkpoint_lock = std::make_unique<FileLock>(options.checkpoint_path, "checkpoint file");
      if (checkpoint_lock->held()) remove_stale_temporaries(options.checkpoint_path, ".tmp.", "");
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_on_error(world.comm, error);
  CommPool pool(data.comm, config.parallel.comm_pool_capacity, collectives.factory);
  // ZeRO-1 shards over the gradient communicator: the data world, whatever groups the planners form.
  AdamW optimizer = config.parallel.distributed_optimizer ? AdamW(model, config.optimizer, pool.gradients())
                                                          : AdamW(model, config.optimizer);
  result.optimizer_state_bytes = optimizer.state_bytes();
  if (restart) {
    restore_checkpoint(*restart, model, optimizer);
    restart->params = restart->first_moment = restart->second_moment = {};  // on the device now
  }
  const PlanningBasis planning =
      restart ? restart->planning
              : PlanningBasis{result.planning_gflops_per_rank, cost.source, cost.calibration_text, capacity,
                              encode_gemm_selection(gemm_choice.selection)};
  result.memory_estimate_mib =
      (need.state_bytes + model.activation_bytes(peak.llm_rows, peak.patches, peak.key_rows)) / 1048576.0;
  const std::vector<RunAttribute> provenance = gather_provenance(config, world, options.command_line);
  if (log) print_banner(*log, config, world, model, result, peak, provenance);
  if (log && restart)
    *log << fmt::format("restart: from {} (the state after {} steps; planned with {})\n", restart->path,
                        first_step, cost.source);
  if (log) log->flush();  // seen at once in a batch job's log (a pipe or file buffers it otherwise)
  try {
    if (out) {
      out.write_run_attributes(config, result, model.parameter_count(), provenance, cost.calibration_text);
      if (restart)
        out.writer().set_run_attributes(
            {{"restarted_from", restart->path}, {"restart_step", static_cast<long long>(first_step)}});
    }
  } catch (...) {
    error = std::current_exception();
  }
  agree_on_error(world.comm, error);  // rank 0's failure (e.g. a full disk) stops every rank here

  StepExecutor executor(model, grad_sync_options(config), rank_grid.encoder_groups());
  // Ends the run when no phase changes for runtime.stall_timeout seconds (core/watchdog.hpp).
  Watchdog watchdog(world.rank, config.runtime.stall_timeout);
  // SIGUSR1, SIGTERM or SIGINT, also one received at start-up, stops the run after a step (with a
  // checkpoint when checkpointing). main installs the handlers first thing; a caller of train() gets them
  // here, keeping a signal already received.
  const bool checkpointing = !options.checkpoint_path.empty();
  install_stop_request_handler();
  result.first_step = first_step;
  const auto checkpoint = [&](int next_step) {
    heartbeat("checkpoint");
    const double t = now_seconds();
    save_checkpoint(options.checkpoint_path, config, world, data, model, optimizer, next_step, planning);
    result.checkpoint_seconds += now_seconds() - t;
    ++result.checkpoints_written;
  };
  const double t_loop = now_seconds();
  double t_timed = t_loop;                       // end of the warm-up step
  double planned_ahead_seconds[2] = {0.0, 0.0};  // planning done before the loop: all steps, timed steps
  for (int step = first_step; step < config.steps; ++step) {
    const double t_start = now_seconds();
    heartbeat_step(step, "planning");
    // GlobalBatch -> StepPlan -> RankWork (once per step; the first ones were planned and agreed at
    // start-up, the others on the helper thread during the step before, or now), then agreed on: rank 0's
    // plan broadcast when the policy is not deterministic (StepPlanner::agree, here on the thread that
    // drives MPI; a no-op for a step agreed at start-up or a deterministic policy).
    const bool was_ahead = !plans.queued().empty();
    double exposed_planning = 0.0;
    PhaseTimes planning_wait;
    PlannedStep planned;
    {
      PhaseClock clock(planning_wait, Phase::planning);
      planned = plans.take(step, exposed_planning);
      const double t_agree = host_seconds();
      planner.agree(planned);
      exposed_planning += host_seconds() - t_agree;
    }
    if (was_ahead) {
      exposed_planning = planned.planning_seconds;  // paid at start-up
      planned_ahead_seconds[0] += planned.planning_seconds;
      if (step > first_step) planned_ahead_seconds[1] += planned.planning_seconds;
    }
    const CommPoolStats pool_before = pool.stats();
    // -> StepComms -> StepInputs -> StepOutcome -> synchronised gradients (run_step), -> AdamW.
    StepOutcome outcome = run_step(sampler, executor, pool, planned);
    outcome.seconds[Phase::planning] = exposed_planning;
    // -> a finite loss and gradient, or the run stops here, before AdamW spreads a NaN into every
    // parameter (every rank alike: the values are the synchronised ones). The completed steps' rows stay in
    // the file, which the unwinding closes; /run says why the run stopped.
    try {
      check_finite_step(model, step, outcome.loss_sum / std::max<double>(1.0, planned.batch.loss_targets()),
                        outcome.grad_norm, executor.gradient_sync().synchronised());
    } catch (const NonFiniteError& e) {
      if (out) out.writer().set_run_attribute("stopped", e.what());
      throw;
    }
    {
      PhaseClock clock(outcome.seconds, Phase::optimizer);
      optimizer.step(model, step);
    }

    // A step planned ahead paid for its planning before the loop: its wall time counts it all the same.
    const double step_seconds = now_seconds() - t_start + (was_ahead ? planned.planning_seconds : 0.0);
    heartbeat("step metrics");
    StepMetrics metrics = reduce_step_metrics(data.comm, planned, outcome, step_seconds,
                                              pool_activity(pool.stats(), pool_before),
                                              result.peak_gflops_per_rank, grid.ranks_per_unit());
    // Rank 0's HDF5 output, timed: the per-rank, plan and prediction rows, then the /steps row and flush.
    StepRecord& s = metrics.record;
    heartbeat("output");
    const double t_output = now_seconds();
    if (out) out.append_step_tables(metrics, planned, data.size);
    s.output_seconds = now_seconds() - t_output;  // the row's own append and flush follow
    if (out) out.append_step(s);
    const double t_written = now_seconds();
    result.output_seconds.push_back(t_written - t_output);
    result.steps.push_back(s);
    if (log) print_step(*log, s, config.steps);
    if (log) log->flush();
    if (step == first_step) t_timed = t_written;
    watchdog.step_finished(step_seconds);
    const bool last = step + 1 == config.steps;
    const bool due =
        checkpointing && options.checkpoint_every > 0 && ((step + 1) % options.checkpoint_every == 0 || last);
    const int stop = agree_on_stop(world.comm);  // the ranks may have seen the signal at different steps
    if (due || (stop && checkpointing)) checkpoint(step + 1);
    if (stop && !last) {
      result.stopped_on_request = true;
      result.stop_signal = stop;
      if (out) out.writer().set_run_attribute("stopped", stop_note(stop, step, options.checkpoint_path));
      break;
    }
  }
  clear_stop_request();
  heartbeat("end of run");
  // Steps planned before the loop paid for their planning there: their wall time counts it all the same.
  double loop[2] = {now_seconds() - t_loop + planned_ahead_seconds[0],
                    now_seconds() - t_timed + planned_ahead_seconds[1]};
  MPI_Allreduce(MPI_IN_PLACE, loop, 2, MPI_DOUBLE, MPI_MAX, world.comm);
  result.loop_seconds = loop[0];
  result.timed_seconds = result.steps.size() > 1 ? loop[1] : loop[0];
  MPI_Allreduce(MPI_IN_PLACE, &result.checkpoint_seconds, 1, MPI_DOUBLE, MPI_MAX, world.comm);
  double rss = peak_resident_mib();
  MPI_Allreduce(MPI_IN_PLACE, &rss, 1, MPI_DOUBLE, MPI_MAX, world.comm);
  result.peak_resident_mib = rss;
  MPI_Allreduce(MPI_IN_PLACE, &start_resident, 1, MPI_DOUBLE, MPI_MAX, world.comm);
  result.start_resident_mib = start_resident;
  try {
    if (out) {
      out.writer().set_run_attributes(
          {{"peak_resident_mib", rss},
           {"start_resident_mib", start_resident},
           {"peak_resident_scope",
            own_peak ? "this run" : "the process so far (the peak could not be reset)"},
           {"checkpoints_written", static_cast<long long>(result.checkpoints_written)},
           {"checkpoint_seconds", result.checkpoint_seconds}});
      out.writer().close();  // fsynced, the lock released
    }
  } catch (...) {
    error = std::current_exception();
  }
  agree_on_error(world.comm, error);
  if (log) print_summary(*log, result, world, options.out_path);
  if (log && result.checkpoints_written > 0)
    *log << fmt::format("checkpoints: {} written to {}, {:.3f} s in all ({:.2f}% of the run's wall time)\n",
                        result.checkpoints_written, options.checkpoint_path, result.checkpoint_seconds,
                        100.0 * result.checkpoint_seconds / result.loop_seconds);
  if (log && result.stopped_on_request)
    *log << fmt::format("stopped by {} after step {} of {}{}\n", stop_signal_name(result.stop_signal),
                        result.steps.back().step, config.steps,
                        checkpointing ? ": resume with run --restart " + options.checkpoint_path : "");
  return result;
}

}  // namespace minimllm
