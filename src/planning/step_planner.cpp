#include "minimllm/planning/step_planner.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "minimllm/config/input_error.hpp"
#include "minimllm/core/agreement.hpp"
#include "minimllm/core/clock.hpp"
#include "minimllm/planning/plan_traffic.hpp"

namespace minimllm {

StepPlanner::StepPlanner(const Sampler& sampler, const LayoutSource& layouts, const World& world)
    : StepPlanner(sampler, layouts, world, world) {}

StepPlanner::StepPlanner(const Sampler& sampler, const LayoutSource& layouts, const World& units,
                         const World& agreement)
    : sampler_(sampler), layouts_(layouts), world_(units), agreement_(agreement) {}

PlannedStep StepPlanner::with_plan(GlobalBatch batch, StepPlan plan) const {
  return planned_step(std::move(batch), std::move(plan), world_.rank, world_.size,
                      layouts_.encoder_schedule());
}

StepForecast StepPlanner::forecast(const PlannedStep& planned) const {
  return {layouts_.predict(planned.plan, planned.batch),
          plan_traffic(planned.plan, planned.batch, layouts_.cost(), world_.size)};
}

PlannedStep StepPlanner::plan(int step) const {
  // Host work only (no kernel, no MPI, no Kokkos Tools region), so it may run on a helper thread.
  const double t0 = host_seconds();
  GlobalBatch batch = sampler_.batch(step);
  PlannedStep planned;
  if (layouts_.deterministic()) {
    StepPlan plan = layouts_.plan(batch);
    planned = with_plan(std::move(batch), std::move(plan));
  } else if (agreement_.is_root()) {
    try {
      StepPlan plan = layouts_.plan(batch);
      planned = with_plan(std::move(batch), std::move(plan));
    } catch (...) {  // shared by agree(), so that every rank fails alike
      planned.step = step;
      planned.planning_error = std::current_exception();
    }
  } else {
    planned.step = step;
    planned.batch = std::move(batch);
    planned.awaiting_plan = true;
  }
  planned.planning_seconds = host_seconds() - t0;
  return planned;
}

void StepPlanner::agree(PlannedStep& planned) const {
  if (planned.agreed) return;
  planned.agreed = true;
  if (layouts_.deterministic()) return;
  const double t0 = host_seconds();
  // Rank 0's outcome: 0 a plan, 1 invalid input, 2 another failure; then the plan's bytes or the message.
  long long header[2] = {0, 0};
  std::string bytes;
  if (agreement_.is_root()) {
    if (planned.planning_error) {
      try {
        std::rethrow_exception(planned.planning_error);
      } catch (const InputError& e) {
        header[0] = 1, bytes = e.what();
      } catch (const std::exception& e) {
        header[0] = 2, bytes = e.what();
      } catch (...) {
        header[0] = 2, bytes = "planning failed on rank 0";
      }
    } else {
      bytes = serialize_plan(planned.plan);
    }
    header[1] = static_cast<long long>(bytes.size());
  }
  MPI_Bcast(header, 2, MPI_LONG_LONG, 0, agreement_.comm);
  bytes.resize(static_cast<size_t>(header[1]));
  for (long long at = 0; at < header[1];) {  // in pieces MPI's int counts can name
    const int count = static_cast<int>(std::min<long long>(header[1] - at, 1 << 30));
    MPI_Bcast(&bytes[at], count, MPI_CHAR, 0, agreement_.comm);
    at += count;
  }
  if (header[0] == 1) throw InputError(bytes);
  if (header[0] == 2) throw AgreedFailure(0, bytes);  // every rank knows it: one line, exit 1, no abort
  // A plan this rank cannot read or that does not fit its batch fails on this rank only: agreed, so that no
  // rank is left waiting in the step's first collective (exit 1 everywhere, not MPI_Abort).
  int code = 0;
  std::string message;
  if (planned.awaiting_plan) {
    try {
      StepPlan plan = deserialize_plan(bytes);
      validate_plan(plan, planned.batch, world_.size);
      const double seconds = planned.planning_seconds;
      planned = with_plan(std::move(planned.batch), std::move(plan));
      planned.planning_seconds = seconds;
      planned.agreed = true;
    } catch (const std::exception& e) {
      code = 1, message = fmt::format("step {}: rank 0's plan: {}", planned.step, e.what());
    }
  }
  const RankFailure failure = agree_on_failure(agreement_.comm, code, message);
  if (failure) throw AgreedFailure(failure.rank, failure.message);
  planned.planning_seconds += host_seconds() - t0;
}

}  // namespace minimllm
