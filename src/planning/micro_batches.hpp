// Micro-batches that respect memory (internal).
#pragma once

#include "assignment.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/planning/cost_model.hpp"

namespace minimllm::planning {

// Orders a group's samples and sets its micro-batch count (the executor splits a group's samples into
// consecutive blocks of near-equal count) to the fewest micro-batches whose token sums all fit
// token_capacity(g). A sample larger than the capacity ends up alone in its micro-batch (best effort).
void fit_micro_batches(LlmGroup& group, const BatchCosts& costs, const CostModel& cost);

}  // namespace minimllm::planning
