// The target-driven layout search of DHP and FlexSP (internal).
#pragma once

#include <vector>

#include "assignment.hpp"
#include "minimllm/planning/cost_model.hpp"

namespace minimllm::planning {

// Target-driven layouts (DHP, FlexSP). For a target LLM time T, the long samples (the prefix of
// costs.by_llm that cannot meet T on one rank, by time or memory) are cut into runs of consecutive
// samples, one group per run, by a dynamic programme:
//   f[i] = min over run lengths l of f[i - l] + (fewest ranks on which run i-l..i-1 meets T)
// where the ranks are any integer (SizeRule::any) or a power of two (SizeRule::power_of_two), at least
// what the run's largest sample needs for memory, found in O(1) (the time is a/g + b in g). Run lengths
// are 1..8, then 1.5x apart, plus the whole prefix, so long runs (many samples forced into one big group
// by memory) stay reachable at O(log n) candidates per sample. The short samples fill the groups' spare
// time g (T - time), then need ceil(rest / T) ranks of their own.
// For each rule, the search bisects T for the smallest target whose demand fits the ranks, then tries
// that target and looser ones (x1.05 .. x1.4) while the best layout so far is slower than the target
// tried, and the all-singleton layout when that could win. Each layout gets its long runs pinned to
// their groups and the short samples by assign_samples; the smallest LLM makespan wins among the
// layouts that respect memory. O(n log n) per target (~20 per rule), plus one assignment per layout.
// The winner's short samples are then refined (refine_assignment, at most one move per group).
enum class SizeRule { any, power_of_two };
struct LayoutChoice {
  std::vector<RankRange> groups;
  std::vector<std::vector<int>> samples;
  double llm_makespan = 0.0;
  int overflowing = 0;       // samples on groups whose memory cannot hold them (0 when some layout can)
  double target = 0.0;       // the target that produced it (0: the all-singleton layout)
  std::vector<char> pinned;  // per sample: one of the long runs, on its group by construction
};
LayoutChoice best_target_layout(const std::vector<SizeRule>& rules, int ranks, const BatchCosts& costs,
                                const CostModel& cost);

}  // namespace minimllm::planning
