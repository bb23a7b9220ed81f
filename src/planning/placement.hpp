// Where groups and images go (internal): LLM groups on consecutive ranks of the nodes, images on encoder
// ranks, encoder ranks over the nodes, and a plan assembled from LLM groups.
#pragma once

#include <string>
#include <vector>

#include "assignment.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/planning/cost_model.hpp"

namespace minimllm::planning {

// Places groups of the given sizes on consecutive ranks in [first_rank, first_rank + ranks): groups larger
// than a node first, from first_rank; the others best-fit-decreasing into the nodes' free space (so a
// group that fits in a node does not span two unless the space is too fragmented); groups of one rank
// fill the rest. Returns the ranges of `sizes` in their given order, then the singletons.
std::vector<RankRange> place_groups(std::vector<int> sizes, int first_rank, int ranks, int ranks_per_node);

// Images to encoder ranks, balancing encoder time, in two passes:
//  1. Whole samples, largest first (a sample's time: its images' summed), each onto the least-loaded
//     encoder rank on the node of its LLM group (preferred_rank[sample], -1: none) while that rank stays
//     within the mean load: its images then stay together, and their rows inside the node.
//  2. The other samples' images by LPT (largest first onto the least-loaded rank): the least-loaded rank
//     on the sample's node wins when it is within `tolerance` x mean load of the best rank overall.
// Most samples are placed whole where each rank takes several (89% of many_images' images), so pass 2
// balances what is left with fewer, smaller items. With stage_of_sample (disaggregated pipeline), the
// images of each stage are balanced on their own, as each stage is encoded in its own pipeline tick.
std::vector<int> balance_items(const GlobalBatch& batch, const CostModel& cost,
                               const std::vector<int>& encoder_ranks, const std::vector<int>& preferred_rank,
                               double tolerance, const std::vector<int>& stage_of_sample = {});

// `count` encoder ranks spread over the nodes as evenly as possible (the first ranks of each node, nodes
// taken in turn), so that images can be encoded on the node of their LLM rank. Sorted.
std::vector<int> spread_over_nodes(int count, int world_size, int ranks_per_node);

// A plan's LLM groups (rank ranges and their samples, in rank order), micro-batches fitted to memory or
// where micro_batch_ends says; no images or encoder ranks yet.
StepPlan assemble_groups(const std::string& policy, Placement placement, const std::vector<RankRange>& groups,
                         std::vector<std::vector<int>> samples, const BatchCosts& costs,
                         const CostModel& cost, const std::vector<std::vector<int>>& micro_batch_ends = {});

// A colocated or disaggregated plan from LLM groups (rank ranges and their samples): micro-batches fitted
// to memory, or where each group's micro-batches end when micro_batch_ends has an entry for it (packed
// bins, LlmGroup::micro_batch_ends); images balanced over encoder_ranks with each sample's group as the
// preferred node.
StepPlan assemble_plan(const std::string& policy, Placement placement, const std::vector<RankRange>& groups,
                       std::vector<std::vector<int>> samples, std::vector<int> encoder_ranks,
                       const GlobalBatch& batch, const BatchCosts& costs, const CostModel& cost,
                       double locality_tolerance, const std::vector<std::vector<int>>& micro_batch_ends = {});

}  // namespace minimllm::planning
