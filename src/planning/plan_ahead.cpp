#include "minimllm/planning/plan_ahead.hpp"

#include <stdexcept>
#include <utility>

#include "minimllm/core/clock.hpp"

namespace minimllm {

PlanAhead::PlanAhead(const StepPlanner& planner, int end_step, bool threaded)
    : planner_(planner), end_step_(end_step), threaded_(threaded) {}

PlanAhead::~PlanAhead() {
  if (next_.valid()) next_.wait();
}

void PlanAhead::queue(int step) {
  queued_.push_back(planner_.plan(step));
  planner_.agree(queued_.back());  // on the calling (MPI) thread, as every rank queues the same steps
}

PlannedStep PlanAhead::take(int step, double& exposed) {
  PlannedStep planned;
  exposed = 0.0;
  if (!queued_.empty()) {
    if (queued_.front().step != step) throw std::logic_error("PlanAhead::take: steps out of order");
    planned = std::move(queued_.front());
    queued_.pop_front();
  } else if (next_.valid() && next_step_ == step) {
    const double t0 = host_seconds();
    planned = next_.get();  // rethrows the helper thread's error
    exposed = host_seconds() - t0;
  } else {
    planned = planner_.plan(step);
    exposed = planned.planning_seconds;
  }
  const int next = step + 1;
  const bool next_queued = !queued_.empty();
  if (threaded_ && next < end_step_ && !next_queued) {
    next_step_ = next;
    next_ = std::async(std::launch::async, [this, next] { return planner_.plan(next); });
  }
  return planned;
}

std::future<StepForecast> PlanAhead::forecast(const PlannedStep& planned) const {
  return std::async(threaded_ ? std::launch::async : std::launch::deferred,
                    [this, &planned] { return planner_.forecast(planned); });
}

}  // namespace minimllm
