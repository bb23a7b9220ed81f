// Plans each step of a run: the step's batch, its plan from the run's layout source and this rank's work
// (step/planned_step.hpp's PlannedStep), agreed over the ranks; apart from that, what only reports on the
// step (its prediction and traffic), which the run computes off the step's critical path.
#pragma once

#include "minimllm/core/world.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/planning/layout_source.hpp"
#include "minimllm/step/planned_step.hpp"

namespace minimllm {

// Each step's plan from the run's layout source. Every rank plans on its own when the policy is
// deterministic; otherwise (flexsp's MILP under a wall-clock limit: ranks could stop the solver at
// different points) rank 0 plans and agree() broadcasts its plan, so all ranks run the same one.
class StepPlanner {
 public:
  StepPlanner(const Sampler& sampler, const LayoutSource& layouts, const World& world);
  // Under tensor parallelism: plans over `units` (a data world, parallel/rank_grid.hpp: this rank's work
  // is its unit's), agreed over `agreement` (the whole world, so that every data world runs rank 0's plan).
  StepPlanner(const Sampler& sampler, const LayoutSource& layouts, const World& units,
              const World& agreement);

  // What a step needs before it can start: its batch, its plan and this rank's work. Host work only, no
  // MPI, and const: safe on a helper thread while the main thread runs kernels (PlanAhead). A planner that
  // is not deterministic runs on rank 0 only (the others get the batch and awaiting_plan).
  PlannedStep plan(int step) const;
  // What only reports on an agreed step (/predicted, /steps): the cost model's prediction of its time and
  // its traffic. Host work only and const, like plan(): the run computes it while the step runs.
  StepForecast forecast(const PlannedStep& planned) const;
  // Collective over the world, on the thread that drives MPI, before the step runs (a no-op for a
  // deterministic policy or a step already agreed on): rank 0's plan (or its planning failure, rethrown on
  // every rank as the same InputError or std::runtime_error) to every rank, whose work and prediction then
  // follow from it.
  void agree(PlannedStep& planned) const;

 private:
  // The step with its plan and this rank's work.
  PlannedStep with_plan(GlobalBatch batch, StepPlan plan) const;

  const Sampler& sampler_;
  const LayoutSource& layouts_;
  World world_;      // the ranks the plans place work on
  World agreement_;  // the ranks that run the same plan
};

}  // namespace minimllm
