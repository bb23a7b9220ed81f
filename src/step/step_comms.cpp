#include "minimllm/step/step_comms.hpp"

#include <vector>

namespace minimllm {

StepComms acquire_step_comms(CommPool& pool, const StepPlan& plan) {
  std::vector<std::vector<int>> groups;
  for (const LlmGroup& g : plan.llm_groups) groups.push_back(g.ranks);
  return {pool.world(), pool.gradients(), pool.acquire_step(std::move(groups))};
}

}  // namespace minimllm
