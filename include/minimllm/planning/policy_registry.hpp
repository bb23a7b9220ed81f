// The layout policies, one row each: what `parallel.policy` and `--policy` accept, what --help and
// `--policy all` list, which deck keys each reads, its flags, and the factory of its planner. No policy
// name is compared as a string outside this registry.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/planning/cost_model.hpp"
#include "minimllm/planning/planner.hpp"

namespace minimllm {

// What a policy does, as flags of its row.
enum PolicyFlag : unsigned {
  kPlanner = 1u << 0,       // plans each step (else: the deck's own fixed layout, parallel.group_sizes, ...)
  kEncoderRanks = 1u << 1,  // puts the encoder on a rank set of its own (disaggregated)
  kRegroups = 1u << 2,      // its LLM groups may change from step to step
  kSolvesMilp = 1u << 3,    // solves a MILP (COIN-OR CBC) under a time limit: not deterministic
};

struct PolicyRow {
  std::string name;
  std::string summary;                    // one line: what it does, whose method it is
  std::vector<std::string> deck_options;  // the parallel.* keys it reads besides parallel.policy
  unsigned flags = 0;                     // PolicyFlag
  // Makes the policy's planner (planners only).
  std::unique_ptr<Planner> (*make)(const CostModel& cost, const PlannerOptions& options) = nullptr;

  bool planner() const { return flags & kPlanner; }
  bool encoder_ranks() const { return flags & kEncoderRanks; }
  bool regroups() const { return flags & kRegroups; }
  bool solves_milp() const { return flags & kSolvesMilp; }
};

// Every policy, in the order --help, `--policy all` and /plans/policy's codes list them: deck first. A new
// row goes at the end, so that the codes of older run files keep their meaning.
const std::vector<PolicyRow>& policy_registry();
// The row of `name`; throws InputError listing the valid names.
const PolicyRow& policy_row(const std::string& name);
// Every name (the valid values of parallel.policy and --policy), deck first.
std::vector<std::string> policy_names();
// The baselines every speed-up is reported over: Megatron-LM as its users run it, and its dynamic
// context parallelism.
const std::string& baseline_policy();          // static
const std::string& dynamic_baseline_policy();  // megatron_dcp
// Checks config.parallel.policy against the registry: InputError "<deck>: parallel.policy = X: must be one
// of ..." (the deck reader accepts any name; the planners it names live above it).
void check_policy(const RunConfig& config);

}  // namespace minimllm
