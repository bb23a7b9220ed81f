// DHP's planner as its paper describes it (internal; Niu et al., arXiv 2602.21788): two stages.
//  1. Memory-aware best-fit-decreasing packing: samples longest first; each goes into the open pack with
//     the least room left that still holds it, else opens a pack sized for it: the smallest group g that
//     holds the sample, with room capacity(g) (CapacityTable: the memory model, at most g x the per-rank
//     token budget). A pack is one micro-batch of its group.
//  2. A dynamic programme allocating any integer number of ranks to the packs, in decreasing order of
//     work, a group taking a run of consecutive packs (one micro-batch each):
//        f[i][d] = min over j < i, g of max(f[j][d - g], T(packs j..i-1, g)),  g >= their largest need
//     solved in its decision form: for a target makespan T, the fewest ranks
//        r[i] = min over j of r[j] + (smallest g >= need with T(packs j..i-1, g) <= T)   (O(1) each)
//     and the smallest T with r[packs] <= ranks found by bisection (to a relative 1e-4; bracketed from 1/8
//     above the lower bound, the step doubling): the same optimum
//     as the two-dimensional table, in O(packs x runs x log(1/tolerance)) instead of O(packs^2 ranks^2).
//     Runs: every length up to 16 packs, then 1.5x apart, and all packs in one group.
//     T(run, g) = group_time (group_time.hpp): its samples' one-rank compute / g plus the context-parallel
//     exchanges, over nodes when g > ranks_per_node.
#pragma once

#include <vector>

#include "assignment.hpp"
#include "group_time.hpp"

namespace minimllm::planning {

struct DhpPack {
  std::vector<int> samples;  // longest first
  double tokens = 0.0, work = 0.0, capacity = 0.0;
  int need = 1;  // the smallest group that holds it
};

// Stage 1. Packs in the order they were opened.
std::vector<DhpPack> pack_best_fit_decreasing(const BatchCosts& costs, const CapacityTable& capacity);

struct DhpAllocation {
  std::vector<std::vector<int>> runs;  // pack indices of each group, in decreasing work
  std::vector<int> sizes;              // ranks of each group
  double makespan = 0.0;               // the largest T(run, size)
  bool feasible = false;               // some allocation fits the ranks (every pack's need met)
};

// Stage 2, for packs in any order (sorted by decreasing work inside). shortcuts: runs that cannot use fewer
// ranks than the prefix's best so far are ruled out by bounds of their size (the work a group can do within
// the target, two ranks' collectives, their sizes at the bisection's earlier probes) before any is
// computed, and each computed size bounds the next probe's search (the same allocation, faster; false: every
// run of every probe sized from scratch, the plain DP, for tests).
DhpAllocation allocate_ranks(const std::vector<DhpPack>& packs, const CostModel& cost, int ranks,
                             bool shortcuts = true);

}  // namespace minimllm::planning
