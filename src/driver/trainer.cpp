#include "minimllm/driver/trainer.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <exception>
#include <future>
#include <ostream>

#include "minimllm/core/clock.hpp"
#include "minimllm/core/phase.hpp"
#include "minimllm/core/stop_request.hpp"
#include "minimllm/core/watchdog.hpp"
#include "minimllm/driver/agreement.hpp"
#include "minimllm/driver/checkpoint_schedule.hpp"
#include "minimllm/driver/provenance.hpp"
#include "minimllm/driver/run_report.hpp"
#include "minimllm/driver/run_setup.hpp"
#include "minimllm/metrics/cpu_peak.hpp"
#include "minimllm/step/finite_check.hpp"
#include "minimllm/step/run_step.hpp"
#include "minimllm/step/step_metrics.hpp"

namespace minimllm {

namespace {

// A step's plan as the loop takes it (GlobalBatch -> StepPlan -> RankWork, once per step): planned and
// agreed at start-up, planned on the helper thread during the step before, or now; then agreed on (rank 0's
// plan broadcast when the policy is not deterministic: StepPlanner::agree, here on the thread that drives
// MPI; a no-op for a step agreed at start-up or a deterministic policy).
struct TakenPlan {
  PlannedStep planned;
  double exposed_seconds = 0.0;      // planning on this step's critical path
  bool planned_before_loop = false;  // one of the start-up steps: its planning was paid there
};

TakenPlan take_plan(PlanAhead& plans, const StepPlanner& planner, int step) {
  TakenPlan taken;
  taken.planned_before_loop = !plans.queued().empty();
  PhaseTimes planning_wait;
  {
    PhaseClock clock(planning_wait, Phase::planning);
    taken.planned = plans.take(step, taken.exposed_seconds);
    const double t_agree = host_seconds();
    planner.agree(taken.planned);
    taken.exposed_seconds += host_seconds() - t_agree;
  }
  if (taken.planned_before_loop) taken.exposed_seconds = taken.planned.planning_seconds;  // paid at start-up
  return taken;
}

}  // namespace

TrainResult train(const RunConfig& config, const World& world, const TrainOptions& options) {
  std::ostream* log = world.is_root() ? options.log : nullptr;
  TrainResult result;
  RunSetup run(config, world, options, result);  // everything before the first step (driver/run_setup.hpp)
  result.first_step = run.first_step;
  const World& data = run.data();
  Model& model = *run.model;
  StepExecutor& executor = *run.executor;
  RunOutput& out = *run.out;
  // Ends the run when no phase changes for runtime.stall_timeout seconds (core/watchdog.hpp).
  Watchdog watchdog(world.rank, config.runtime.stall_timeout);
  CheckpointSchedule checkpoints(config, world, options, run, result);
  const double t_loop = now_seconds();
  double t_timed = t_loop;                       // end of the warm-up step
  double planned_ahead_seconds[2] = {0.0, 0.0};  // planning done before the loop: all steps, timed steps
  for (int step = run.first_step; step < config.steps; ++step) {
    const double t_start = now_seconds();
    heartbeat_step(step, "planning");
    TakenPlan taken = take_plan(*run.plans, *run.planner, step);
    PlannedStep& planned = taken.planned;
    if (taken.planned_before_loop) {
      planned_ahead_seconds[0] += planned.planning_seconds;
      if (step > run.first_step) planned_ahead_seconds[1] += planned.planning_seconds;
    }
    // The step's prediction and traffic only report on it: forecast while it runs, kept off its start.
    std::future<StepForecast> forecast = run.plans->forecast(planned);
    const CommPoolStats pool_before = run.pool->stats();
    // -> StepComms -> StepInputs -> StepOutcome -> synchronised gradients (run_step), -> AdamW.
    StepOutcome outcome = run_step(*run.sampler, executor, *run.pool, planned);
    outcome.seconds[Phase::planning] = taken.exposed_seconds;
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
      run.optimizer->step(model, step);
    }

    // A step planned ahead paid for its planning before the loop: its wall time counts it all the same.
    const double step_seconds =
        now_seconds() - t_start + (taken.planned_before_loop ? planned.planning_seconds : 0.0);
    heartbeat("step metrics");
    planned.forecast = forecast.get();
    StepMetrics metrics = reduce_step_metrics(data.comm, planned, outcome, step_seconds,
                                              pool_activity(run.pool->stats(), pool_before),
                                              result.peak_gflops_per_rank, run.grid.ranks_per_unit());
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
    if (step == run.first_step) t_timed = t_written;
    watchdog.step_finished(step_seconds);
    if (checkpoints.after_step(step)) break;
  }
  clear_stop_request();  // acted upon, or the run finished anyway
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
  double start_resident = run.start_resident_mib;
  MPI_Allreduce(MPI_IN_PLACE, &start_resident, 1, MPI_DOUBLE, MPI_MAX, world.comm);
  result.start_resident_mib = start_resident;
  std::exception_ptr error;
  try {
    if (out) {
      out.writer().set_run_attributes(
          {{"end_time_utc", utc_now()},
           {"peak_resident_mib", rss},
           {"start_resident_mib", start_resident},
           {"peak_resident_scope",
            run.own_peak ? "this run" : "the process so far (the peak could not be reset)"},
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
    *log << fmt::format(
        "stopped by {} after step {} of {}{}\n", stop_signal_name(result.stop_signal),
        result.steps.back().step, config.steps,
        options.checkpoint_path.empty() ? "" : ": resume with run --restart " + options.checkpoint_path);
  return result;
}

}  // namespace minimllm
