// Steps planned before they run (issue: every cost of dynamism charged): the first ones at start-up, for
// the memory estimate, then each next step on a helper thread while the current one computes, as FlexSP
// overlaps its solver with training (runtime.plan_ahead). What a step then waits for is the planning left
// on its critical path; the rest is hidden.
#pragma once

#include <deque>
#include <future>

#include "minimllm/planning/step_planner.hpp"

namespace minimllm {

class PlanAhead {
 public:
  // Plans steps below end_step; threaded: the next step on a helper thread (else when it begins).
  PlanAhead(const StepPlanner& planner, int end_step, bool threaded);
  ~PlanAhead();  // waits for the helper thread (its result or error is dropped)
  PlanAhead(const PlanAhead&) = delete;
  PlanAhead& operator=(const PlanAhead&) = delete;

  // Plans `step` now, agrees on it (StepPlanner::agree: collective, on the thread that drives MPI) and
  // queues it (the start-up estimate's steps).
  void queue(int step);
  const std::deque<PlannedStep>& queued() const { return queued_; }

  // Step `step`'s plan (steps are taken in order): the queued one, else the helper thread's (waited
  // for), else planned now. `exposed`: the planning seconds on this call's critical path (the wait, or
  // the whole planning when planned now; 0 for a queued step, paid before). Before returning, starts
  // step + 1 on the helper thread when threaded, below end_step and not queued. An error of the helper
  // thread (e.g. a sample that fits no layout, InputError) is thrown here, by the step it belongs to.
  // A step not queued is not agreed on yet: the caller calls StepPlanner::agree on it.
  PlannedStep take(int step, double& exposed);
  // What only reports on a taken step (StepPlanner::forecast), off its critical path: on a helper thread
  // while the step runs when threaded, else when get() is called (after the step). `planned` must outlive
  // the future.
  std::future<StepForecast> forecast(const PlannedStep& planned) const;
  // The step the helper thread is planning (or has planned, not yet taken); -1 when none.
  int in_flight() const { return next_.valid() ? next_step_ : -1; }

 private:
  const StepPlanner& planner_;
  int end_step_;
  bool threaded_;
  std::deque<PlannedStep> queued_;
  std::future<PlannedStep> next_;  // the helper thread's step, when valid
  int next_step_ = -1;
};

}  // namespace minimllm
