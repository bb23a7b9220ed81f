// The layouts Megatron-LM users run (internal): sequences packed into bins of a per-rank token budget,
// `static` (fixed data-parallel x context-parallel degrees, bins dealt over the replicas balanced by
// count) and `megatron_dcp` (dynamic context parallelism: power-of-two groups sized by each sample's
// length). docs/PARALLELISM.md says where they differ from Megatron-LM's code.
#pragma once

#include <vector>

#include "assignment.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/planning/cost_model.hpp"

namespace minimllm::planning {

// Tokens per rank of a bin: tokens_per_rank, or (0) derived: the smallest budget that holds the step's
// longest sample on cp ranks, ceil(max_tokens / cp), or what cp ranks' memory holds per rank,
// token_capacity(cp) / cp, when that is less.
int token_budget(int tokens_per_rank, int cp, int max_tokens, const CostModel& cost);

// Throws InputError naming parallel.cp and the valid degrees unless cp divides world_size.
void require_cp_divides(const char* policy, int cp, int world_size);

// Next-fit packing of `samples`, in their order, into bins of at most `capacity` tokens: a sample that
// would overflow the open bin starts a new one (Megatron-LM NaiveSequencePackingScheduler); a sample
// longer than the capacity sits alone in its bin. Returns each bin's end position in `samples`.
std::vector<int> pack_in_order(const std::vector<int>& samples, const std::vector<double>& tokens,
                               double capacity);

// static: world / cp replicas of cp consecutive ranks; the batch packed in order into bins of cp x budget
// tokens (and at most what cp ranks' memory holds); bins split, last first, until their count is a
// multiple of the replicas (as Megatron-LM does), then bin k to replica k mod replicas as its micro-batch
// k / replicas; items follow their sample's replica. Throws InputError when cp does not divide the
// world or a sample exceeds cp x budget.
StepPlan megatron_static_plan(const GlobalBatch& batch, const BatchCosts& costs, const CostModel& cost,
                              int world_size, int cp, int tokens_per_rank);
// Its two halves: the LLM groups alone (same throws), and the plan on them (items on their group's ranks).
std::vector<LlmGroup> megatron_static_groups(const GlobalBatch& batch, const BatchCosts& costs,
                                             const CostModel& cost, int world_size, int cp,
                                             int tokens_per_rank);
StepPlan static_plan_of(std::vector<LlmGroup> groups, const GlobalBatch& batch, int world_size);
// A lower bound of predict()'s makespan for static's plan on these groups, from its groups alone: each
// group's encoder work (its items stay on its ranks) and LLM compute shared by its ranks, the slowest
// group of each phase; communication, boundary and imbalance within a group only add to it.
double static_makespan_lower_bound(const std::vector<LlmGroup>& groups, const BatchCosts& costs,
                                   const std::vector<double>& encoder_time);

// megatron_dcp: Megatron-LM's hybrid context-parallel schedule in one round (see docs/PARALLELISM.md):
// a sample of s tokens needs a group of next_pow2(ceil(s / budget)) ranks (or the whole world when that
// is fewer); samples longest first,
// bucketed by s^2 / group, each to a new group of contiguous free ranks or the least-loaded group of its
// size; ranks left empty widen the smallest group; each group packs its samples into bins of
// group x budget tokens. Throws InputError when a sample needs more than the world: ceil(s / budget) >
// world_size.
StepPlan megatron_dcp_plan(const GlobalBatch& batch, const BatchCosts& costs, const CostModel& cost,
                           int world_size, int budget);

}  // namespace minimllm::planning
