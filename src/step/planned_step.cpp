#include "minimllm/step/planned_step.hpp"

#include <utility>

#include "minimllm/core/clock.hpp"

namespace minimllm {

PlannedStep planned_step(GlobalBatch batch, StepPlan plan, int rank, int world_size, double linear_weight) {
  PlannedStep planned;
  planned.step = batch.step;
  planned.work = derive_rank_work(plan, batch, rank, world_size, linear_weight);
  planned.batch = std::move(batch), planned.plan = std::move(plan);
  return planned;
}

StepPlanner::StepPlanner(const Sampler& sampler, const LayoutSource& layouts, int rank, int world_size,
                         double linear_weight)
    : sampler_(sampler),
      layouts_(layouts),
      rank_(rank),
      world_size_(world_size),
      linear_weight_(linear_weight) {}

PlannedStep StepPlanner::plan(int step) const {
  // Host work only (no kernel, no MPI, no Kokkos Tools region), so it may run on a helper thread.
  const double t0 = host_seconds();
  GlobalBatch batch = sampler_.batch(step);
  StepPlan plan = layouts_.plan(batch);
  PlannedStep planned = planned_step(std::move(batch), std::move(plan), rank_, world_size_, linear_weight_);
  planned.prediction = layouts_.predict(planned.plan, planned.batch);
  planned.planning_seconds = host_seconds() - t0;
  return planned;
}

}  // namespace minimllm
