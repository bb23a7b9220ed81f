// The communicators of one step, by name: the world's and the gradients' (created once, by the pool) and this
// rank's LLM group's (looked up in the pool, as the step's plan groups the ranks).
#pragma once

#include <memory>

#include "minimllm/layout/step_plan.hpp"
#include "minimllm/parallel/comm_pool.hpp"

namespace minimllm {

struct StepComms {
  std::shared_ptr<Communicator> world;      // every rank: loss, boundary exchange
  std::shared_ptr<Communicator> gradients;  // every rank: the gradient all-reduce (CommPool::gradients)
  std::shared_ptr<Communicator> llm_group;  // context parallelism inside the group; null: no LLM work
};

// Collective over the world: every rank looks up every LLM group of the plan in the same order
// (CommPool::acquire_step), so creation on a pool miss never deadlocks.
StepComms acquire_step_comms(CommPool& pool, const StepPlan& plan);

}  // namespace minimllm
