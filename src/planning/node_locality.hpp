// OrchMLLM's post-balancing done node-wise (internal; orch): the samples (and then the images) are
// balanced over the nodes first, moving as little as possible away from where they are — a sample from
// its loader's node (plan_traffic.hpp), an image from its sample's LLM node — and then over each node's
// ranks, so that the all-to-all moving samples and embeddings stays inside nodes where balance allows.
#pragma once

#include <vector>

#include "assignment.hpp"
#include "minimllm/planning/cost_model.hpp"

namespace minimllm::planning {

// Items of cost cost[i] whose home is node home[i], over nodes of ranks_of_node[n] ranks: each node keeps
// its items, in stay_order (the costliest to move first: the most bytes per unit of cost), while they fit
// its share of the total (total x its ranks / all ranks); the rest go, largest cost first, to the node
// whose load per rank is least. Returns each item's node.
std::vector<int> balance_over_nodes(const std::vector<double>& cost, const std::vector<int>& home,
                                    const std::vector<int>& ranks_of_node,
                                    const std::vector<int>& stay_order);

// A data-parallel layout over ranks 0 .. world - 1 in groups of group_size consecutive ranks (1: plain
// data parallelism; static's cp: its DP x CP layout, the replicas balanced), balanced node-wise: the samples
// over the nodes (balance_over_nodes, LLM cost; over each node-spanning group when groups are larger than a
// node), then over each node's groups (assign_samples), then refined over all groups (refine_assignment: a
// sample leaves its node only when that shortens the slowest group); the bundles are then placed on the
// node's groups nearest their loaders (place_bundles_near_loaders). Images likewise over the ranks by
// encoder cost, home = their sample's LLM node, a sample's images kept together where balance allows (over
// the nodes as one bundle; on the node's ranks whole while a rank stays within the node's mean load, else
// image by image), placed nearest their sample's LLM group. group_size must divide world.
struct NodeWiseLayout {
  std::vector<RankRange> groups;          // the LLM groups, in rank order
  std::vector<std::vector<int>> samples;  // per group
  std::vector<int> item_owner;            // per image, in sample order
};
NodeWiseLayout node_wise_balance(const GlobalBatch& batch, const BatchCosts& costs, const CostModel& cost,
                                 int world, int group_size = 1);

// Bundles of items to ranks, by where the items' bytes are: bundles[r] is what rank r + first_rank runs
// (ranks first_rank .. first_rank + bundles.size() - 1); (ranks first_rank .. first_rank + bundles.size() -
// 1), and any bundle may go to any of them (all alike: the balance is unchanged); loader[i] and bytes[i]:
// where item i is and how many bytes it moves. First bundles to nodes, each node taking as many as it has
// ranks, by the bytes a bundle holds on the node; then, inside each node, to ranks by the bytes already on
// the rank. Greedy (each level a maximum-weight assignment: the heaviest (bundle, place) pair left first),
// O(items log items). Reorders `bundles`.
void place_bundles_near_loaders(std::vector<std::vector<int>>& bundles, int first_rank,
                                const std::vector<int>& loader, const std::vector<double>& bytes,
                                int ranks_per_node);

}  // namespace minimllm::planning
