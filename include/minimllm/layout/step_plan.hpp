// StepPlan: where one step's work runs. Planners produce it (identically on every rank); the step
// executor carries it out. A plan changes where work runs, never the math.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/data/sampler.hpp"

namespace minimllm {

enum class Placement {
  colocated,      // encoder and LLM share all ranks
  disaggregated,  // encoder ranks and LLM ranks are disjoint (DistTrain)
};
const char* to_string(Placement placement);

struct LlmGroup {
  std::vector<int> ranks;    // sorted world ranks; any size >= 1 (context parallel inside the group)
  std::vector<int> samples;  // indices into the global batch, in processing order
  int micro_batches = 1;     // samples are processed in this many consecutive micro-batches
  // Where each micro-batch ends in `samples` when they are packed bins of their own sizes (static,
  // megatron_dcp): increasing, one per micro-batch, the last = samples.size(). Empty: consecutive blocks
  // of near-equal count (micro_batch_begin in rank_work.hpp).
  std::vector<int> micro_batch_ends;
};

// Every value of PlanOrigin::source and of PlanOrigin::solver_status (described there), in the order of
// their codes in the run file's enumerated /plans/planner_source and /plans/solver_status (docs/HDF5.md):
// a value is added at the end, so that a code keeps its meaning.
inline constexpr std::array<const char*, 4> kPlanSources = {"heuristic", "milp", "static_layout", "deck"};
inline constexpr std::array<const char*, 6> kSolverStatuses = {"not_run",     "optimal",   "time_limit",
                                                               "no_solution", "too_large", "unavailable"};

// Which algorithm of its policy produced a plan, and how a solver fared (docs/HDF5.md, /plans).
struct PlanOrigin {
  // One of kPlanSources. "heuristic": the policy's own algorithm (every policy but flexsp's solver);
  // "milp": flexsp's MILP solution; "static_layout": the static layout (parallel.cp, packed bins), which a
  // dynamic policy keeps when it predicts a faster step; "deck": the deck's own layout.
  std::string source = "heuristic";
  // One of kSolverStatuses, what flexsp's MILP did: "not_run" (another policy, or
  // parallel.flexsp_time_limit 0), "optimal", "time_limit" (stopped with a solution, not proven optimal),
  // "no_solution", "too_large" (not attempted: too many columns for the time limit), "unavailable" (a
  // build without CBC).
  std::string solver_status = "not_run";
  double solver_gap = -1.0;     // the solver's relative optimality gap; -1: not run or no bound
  double solver_seconds = 0.0;  // wall time of the solve (on the rank that solved)
};

struct StepPlan {
  std::string policy = "static";  // what made the plan
  PlanOrigin origin;
  Placement placement = Placement::colocated;
  std::vector<LlmGroup> llm_groups;  // a partition of the LLM ranks
  std::vector<int> encoder_ranks;    // sorted; all ranks when colocated
  std::vector<int> item_owner;       // encoder rank of every item, items numbered in sample order
};

// A plan as bytes and back (the broadcast of a plan made on one rank, step/planned_step.hpp). Throws
// std::invalid_argument when the bytes are not a serialised plan.
std::string serialize_plan(const StepPlan& plan);
StepPlan deserialize_plan(const std::string& bytes);

// Throws std::invalid_argument naming the first violation: every LLM rank in exactly one group, every
// sample in exactly one group, every item owned by an encoder rank, placement rules, micro-batch counts.
void validate_plan(const StepPlan& plan, const GlobalBatch& batch, int world_size);

// Items of a batch numbered in sample order: the first item number of each sample (size samples+1).
std::vector<int> first_item_of_samples(const GlobalBatch& batch);

// The rank side of a layout; deal_in_order() fills in the work.
struct LayoutShape {
  std::vector<std::vector<int>> llm_groups;  // sorted rank lists
  std::vector<int> encoder_ranks;            // sorted
  Placement placement = Placement::colocated;
  int micro_batches = 1;            // per group, capped at its sample count
  bool items_follow_groups = true;  // a sample's items round-robin over its group's ranks;
                                    // else item i on encoder_ranks[i mod size]
};

// A sample's items round-robin over its LLM group's ranks (in the group's sample order): fills
// plan.item_owner for a colocated plan whose groups are set.
void place_items_with_groups(StepPlan& plan, const GlobalBatch& batch);

// Samples dealt to groups in order, in contiguous blocks proportional to group size.
StepPlan deal_in_order(const GlobalBatch& batch, const LayoutShape& shape, const std::string& policy);

// In-order layout (the `naive` policy, and the single-rank reference of the tests): groups of
// `group_size` consecutive ranks (a divisor of world_size), samples dealt in order in equal blocks.
StepPlan make_in_order_plan(const GlobalBatch& batch, int world_size, int group_size = 1);

// Colocated groups of the given sizes over consecutive ranks.
StepPlan make_grouped_plan(const GlobalBatch& batch, const std::vector<int>& group_sizes);

// The deck's own layout (parallel: section) for this world size and step. Throws InputError naming the
// deck key when the deck's sizes cannot fit world_size.
StepPlan make_deck_plan(const RunConfig& config, const GlobalBatch& batch, int world_size);

}  // namespace minimllm
