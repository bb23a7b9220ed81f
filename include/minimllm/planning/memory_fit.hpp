// Memory that binds: what each rank of a plan holds under the cost model's memory model, the checks that
// a batch and a plan fit the memory per rank, and the wrapper that makes every policy's plan fit
// (docs/PARALLELISM.md, "Memory").
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "minimllm/config/input_error.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/planning/cost_model.hpp"
#include "minimllm/planning/planner.hpp"

namespace minimllm {

// A policy cannot hold a step in the memory per rank. An InputError (a run exits 2); the simulator
// reports the policy as not fitting instead.
class DoesNotFit : public InputError {
 public:
  using InputError::InputError;
};

// Bytes for people: "79.60 GiB", "3.52 MiB", "12.0 KiB".
std::string bytes_text(double bytes);

// The capacity in words: "80.00 GiB per rank (machine.memory_gib): 0.02 GiB parameters, gradients and
// AdamW moments".
std::string memory_summary(const CostModel& cost);

// Bytes each rank holds at its peak in a plan: state + fixed + its items' bytes (MemoryModel::item_bytes) +
// its largest micro-batch (micro_batch_bytes of the micro-batch's tokens on its group).
std::vector<double> rank_peak_bytes(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                                    int world_size);

// With a capacity: throws InputError when the model state alone exceeds it, or when a sample is longer
// than any group of at most world_size ranks can hold (token_capacity(world_size)), naming the sample,
// its length and the capacity. Nothing could run such a batch.
void require_batch_fits(const GlobalBatch& batch, const CostModel& cost, int world_size);

// The planner of a policy with memory made to bind: without a capacity, make(cost) as it is. With one,
// each step: require_batch_fits; the policy plans with room kept for the encoder's activations
// (encoder_reserve_bytes: its even share of the step's rows plus the largest item); items move off
// ranks they would overflow, largest first, each to the encoder rank with the most room (items are the only
// work that can move without changing the LLM layout); a plan that still does not fit throws DoesNotFit
// naming the rank, its bytes and the capacity.
using PlannerFactory = std::function<std::unique_ptr<Planner>(const CostModel&)>;
std::unique_ptr<Planner> memory_bound(const std::string& policy, const CostModel& cost, PlannerFactory make);

}  // namespace minimllm
