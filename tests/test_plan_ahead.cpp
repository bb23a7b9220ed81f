// Planning ahead on a helper thread (planning/plan_ahead.hpp): the same plans as planning each step when it
// begins, in step order; planning hidden behind a step that takes longer than it; a planning error
// thrown by the step it belongs to.
#include <gtest/gtest.h>

#include "minimllm/config/input_error.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/planning/cost_model.hpp"
#include "minimllm/planning/layout_source.hpp"
#include "minimllm/planning/plan_ahead.hpp"
#include "minimllm/planning/step_planner.hpp"

namespace minimllm {
namespace {

constexpr int kRanks = 4;

RunConfig dhp_config() {
  RunConfig config;
  config.parallel.policy = "dhp";
  config.data.global_batch = 24;
  return config;
}

void expect_same_plan(const PlannedStep& a, const PlannedStep& b) {
  EXPECT_EQ(a.step, b.step);
  ASSERT_EQ(a.plan.llm_groups.size(), b.plan.llm_groups.size());
  for (size_t g = 0; g < a.plan.llm_groups.size(); ++g) {
    EXPECT_EQ(a.plan.llm_groups[g].ranks, b.plan.llm_groups[g].ranks);
    EXPECT_EQ(a.plan.llm_groups[g].samples, b.plan.llm_groups[g].samples);
  }
  EXPECT_EQ(a.plan.item_owner, b.plan.item_owner);
  EXPECT_EQ(a.work.group_ranks, b.work.group_ranks);
  EXPECT_EQ(a.work.items, b.work.items);
  EXPECT_EQ(a.work.micro_batches.size(), b.work.micro_batches.size());
}

struct Fixture {
  RunConfig config = dhp_config();
  Sampler sampler{config};
  LayoutSource layouts{config, kRanks, default_cost_model(config, 100.0, kRanks)};
  StepPlanner planner{sampler, layouts, World{MPI_COMM_WORLD, 1, kRanks}};
};

TEST(PlanAhead, GivesThePlansOfPlanningEachStepWhenItBegins) {
  Fixture f;
  PlanAhead ahead(f.planner, 12, true);
  ahead.queue(0);
  ahead.queue(1);
  for (int step = 0; step < 12; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    double exposed = -1.0;
    const PlannedStep planned = ahead.take(step, exposed);
    EXPECT_GE(exposed, 0.0);
    if (step < 2) {
      EXPECT_EQ(exposed, 0.0);  // queued: paid at start-up
    }
    expect_same_plan(planned, f.planner.plan(step));
  }
}

TEST(PlanAhead, PlansTheNextStepWhileTheCurrentOneRuns) {
  // How much the thread hides is a timing (the run's summary reports it); what is asserted is the
  // schedule: after taking step t the helper thread has step t + 1 in hand, and inline planning has none.
  Fixture f;
  PlanAhead threaded(f.planner, 6, true), inline_(f.planner, 6, false);
  threaded.queue(0);
  for (int step = 0; step < 6; ++step) {
    double exposed = 0.0;
    threaded.take(step, exposed);
    EXPECT_EQ(threaded.in_flight(), step + 1 < 6 ? step + 1 : -1) << "after step " << step;
    inline_.take(step, exposed);
    EXPECT_EQ(inline_.in_flight(), -1);
    EXPECT_GT(exposed, 0.0);  // planned on the step's own critical path
  }
}

TEST(PlanAhead, APlanningErrorIsThrownByItsStep) {
  RunConfig config = dhp_config();
  config.parallel.policy = "static";
  config.parallel.cp = 1;
  config.parallel.tokens_per_rank = 1;  // no sample fits: every step's planning fails
  const Sampler sampler(config);
  const LayoutSource layouts(config, kRanks, default_cost_model(config, 100.0, kRanks));
  const StepPlanner planner(sampler, layouts, World{MPI_COMM_WORLD, 0, kRanks});
  PlanAhead ahead(planner, 4, true);
  double exposed = 0.0;
  EXPECT_THROW(ahead.take(0, exposed), InputError);  // planned now
  EXPECT_THROW(ahead.take(1, exposed), InputError);  // from the helper thread
}

}  // namespace
}  // namespace minimllm
