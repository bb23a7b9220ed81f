#include "placement.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "load_tree.hpp"
#include "micro_batches.hpp"

namespace minimllm::planning {

// ---------------------------------------------------------------------------------------------------
// Groups on nodes

std::vector<RankRange> place_groups(std::vector<int> sizes, int first_rank, int ranks, int ranks_per_node) {
  const long long used = std::accumulate(sizes.begin(), sizes.end(), 0LL);
  if (used > ranks) throw std::logic_error("place_groups: the groups need more ranks than there are");
  const int singles = static_cast<int>(ranks - used), end = first_rank + ranks;
  std::vector<int> by_size(sizes.size());
  std::iota(by_size.begin(), by_size.end(), 0);
  std::stable_sort(by_size.begin(), by_size.end(), [&](int a, int b) { return sizes[a] > sizes[b]; });

  // Rank order: large groups, then each node's bin (its groups, then singletons to fill it), then the
  // groups no bin could take, then the remaining singletons.
  std::vector<int> sequence;  // group indices in rank order; -1 = a singleton
  int cursor = first_rank;
  size_t next = 0;
  for (; next < by_size.size() && sizes[by_size[next]] > ranks_per_node; ++next) {
    sequence.push_back(by_size[next]);
    cursor += sizes[by_size[next]];
  }
  struct Bin {
    int capacity;
    std::vector<int> groups;
  };
  std::vector<Bin> bins;
  for (int r = cursor; r < end;) {
    const int node_end = std::min(end, (r / ranks_per_node + 1) * ranks_per_node);
    bins.push_back({node_end - r, {}});
    r = node_end;
  }
  // Best fit: the bin with the least room that still fits (lowest index on ties); bins keyed by room.
  std::set<std::pair<int, int>> room;  // (free ranks, bin)
  for (size_t b = 0; b < bins.size(); ++b) room.emplace(bins[b].capacity, static_cast<int>(b));
  std::vector<int> spilled;
  for (; next < by_size.size(); ++next) {
    const int k = by_size[next];
    const auto it = room.lower_bound({sizes[k], -1});
    if (it == room.end()) {
      spilled.push_back(k);
      continue;
    }
    const auto [free, b] = *it;
    room.erase(it);
    bins[b].groups.push_back(k);
    room.emplace(free - sizes[k], b);
  }
  std::vector<int> free_of_bin(bins.size());
  for (const auto& [free, b] : room) free_of_bin[b] = free;
  int singles_left = singles;
  for (size_t b = 0; b < bins.size(); ++b) {
    sequence.insert(sequence.end(), bins[b].groups.begin(), bins[b].groups.end());
    const int fill = std::min(free_of_bin[b], singles_left);
    sequence.insert(sequence.end(), fill, -1);
    singles_left -= fill;
  }
  sequence.insert(sequence.end(), spilled.begin(), spilled.end());
  sequence.insert(sequence.end(), singles_left, -1);

  std::vector<RankRange> ranges(sizes.size());
  std::vector<RankRange> singletons;
  int rank = first_rank;
  for (int k : sequence) {
    if (k < 0) {
      singletons.push_back({rank++, 1});
    } else {
      ranges[k] = {rank, sizes[k]};
      rank += sizes[k];
    }
  }
  ranges.insert(ranges.end(), singletons.begin(), singletons.end());
  return ranges;
}

// ---------------------------------------------------------------------------------------------------
// Images to encoder ranks

std::vector<int> balance_items(const GlobalBatch& batch, const CostModel& cost,
                               const std::vector<int>& encoder_ranks, const std::vector<int>& preferred_rank,
                               double tolerance, const std::vector<int>& stage_of_sample) {
  const int e = static_cast<int>(encoder_ranks.size()), n = static_cast<int>(batch.samples.size());
  // Encoder ranks are sorted, so the ranks of one node are a contiguous range of positions.
  const int nodes = cost.node_of(encoder_ranks.back()) + 1;
  std::vector<int> node_begin(nodes + 1);
  for (int node = 0, pos = 0; node <= nodes; ++node) {
    while (pos < e && cost.node_of(encoder_ranks[pos]) < node) ++pos;
    node_begin[node] = pos;
  }
  const std::vector<int> first_item = first_item_of_samples(batch);
  const int images = first_item.back();
  // Per sample (no per-image arrays: most images are placed with their sample): its images' encoder time
  // summed in image order, and its node (-1: no LLM rank, or no encoder rank on its node); each stage's
  // total, summed in sample order; the samples stage by stage.
  std::vector<double> bundle(n, 0.0);
  std::vector<int> node_of_sample(n, -1);
  int stages = 1;
  for (int s = 0; s < n; ++s) {
    if (!stage_of_sample.empty()) stages = std::max(stages, stage_of_sample[s] + 1);
    for (const EncoderItem& image : batch.samples[s].items) bundle[s] += cost.encoder_time(image);
    const int node = preferred_rank[s] >= 0 ? cost.node_of(preferred_rank[s]) : -1;
    if (node >= 0 && node < nodes && node_begin[node] < node_begin[node + 1]) node_of_sample[s] = node;
  }
  const auto stage_of = [&](int s) { return stage_of_sample.empty() ? 0 : stage_of_sample[s]; };
  std::vector<double> stage_total(stages, 0.0);
  std::vector<int> stage_begin(stages + 1, 0), by_stage(n);
  for (int s = 0; s < n; ++s) stage_total[stage_of(s)] += bundle[s], ++stage_begin[stage_of(s) + 1];
  for (int m = 0; m < stages; ++m) stage_begin[m + 1] += stage_begin[m];
  std::vector<int> next(stage_begin.begin(), stage_begin.end() - 1);
  for (int s = 0; s < n; ++s) by_stage[next[stage_of(s)]++] = s;

  std::vector<int> owner(images), split, split_rows, split_sample;
  std::vector<double> stage_bundle;
  std::vector<char> is_split(n, 0);  // this stage's samples placed image by image
  for (int m = 0; m < stages; ++m) {
    const double mean = stage_total[m] / e, slack = tolerance * mean;
    NodeLoads loads(node_begin);
    // 1. Whole samples, largest first (ties in index order: a stage lists its samples in increasing index),
    //    each onto the least-loaded rank of its node while that rank stays within the stage's mean load: a
    //    sample's images stay together, on its node.
    stage_bundle.assign(stage_begin[m + 1] - stage_begin[m], 0.0);
    for (int q = stage_begin[m]; q < stage_begin[m + 1]; ++q)
      stage_bundle[q - stage_begin[m]] = bundle[by_stage[q]];
    for (int position : order_by_decreasing(stage_bundle)) {
      const int s = by_stage[stage_begin[m] + position];
      if (first_item[s] == first_item[s + 1]) continue;
      if (node_of_sample[s] >= 0) {
        const int pos = loads.argmin_in(node_of_sample[s]);
        if (loads.load(pos) + bundle[s] <= mean) {
          loads.add(pos, bundle[s]);
          std::fill(owner.begin() + first_item[s], owner.begin() + first_item[s + 1], encoder_ranks[pos]);
          continue;
        }
      }
      is_split[s] = 1;
    }
    // 2. The other samples' images one by one, largest first (ties in image order), each onto the
    //    least-loaded rank of its sample's node unless that is more than the slack above the least loaded
    //    of all.
    split.clear(), split_rows.clear(), split_sample.clear();
    for (int q = stage_begin[m]; q < stage_begin[m + 1]; ++q) {
      const int s = by_stage[q];
      if (!is_split[s]) continue;
      is_split[s] = 0;
      for (int i = first_item[s]; i < first_item[s + 1]; ++i) {
        split.push_back(i), split_sample.push_back(s);
        split_rows.push_back(batch.samples[s].items[i - first_item[s]].rows);
      }
    }
    for (int j : order_by_decreasing(split_rows)) {
      const int image = split[j];
      const int s = split_sample[j];
      const int node = node_of_sample[split_sample[j]];
      int pos;
      if (node >= 0) {
        pos = loads.argmin_in(node);
        if (loads.load(pos) > loads.min_lower_bound() + slack) {  // else certainly within the slack
          const int least = loads.argmin();
          if (loads.load(pos) > loads.load(least) + slack) pos = least;
        }
      } else {
        pos = loads.argmin();
      }
      loads.add(pos, cost.encoder_time(batch.samples[s].items[image - first_item[s]]));
      owner[image] = encoder_ranks[pos];
    }
  }
  return owner;
}

std::vector<int> spread_over_nodes(int count, int world_size, int ranks_per_node) {
  const int nodes = (world_size + ranks_per_node - 1) / ranks_per_node;
  std::vector<int> per_node(nodes, 0);
  const auto node_size = [&](int n) { return std::min(ranks_per_node, world_size - n * ranks_per_node); };
  for (int placed = 0, n = 0; placed < std::min(count, world_size); n = (n + 1) % nodes)
    if (per_node[n] < node_size(n)) ++per_node[n], ++placed;
  std::vector<int> ranks;
  for (int n = 0; n < nodes; ++n)
    for (int i = 0; i < per_node[n]; ++i) ranks.push_back(n * ranks_per_node + i);
  return ranks;
}

// ---------------------------------------------------------------------------------------------------
// Plans

StepPlan assemble_groups(const std::string& policy, Placement placement, const std::vector<RankRange>& groups,
                         std::vector<std::vector<int>> samples, const BatchCosts& costs,
                         const CostModel& cost, const std::vector<std::vector<int>>& micro_batch_ends) {
  StepPlan plan;
  plan.policy = policy;
  plan.placement = placement;
  // Groups in rank order, for readable plans.
  std::vector<int> by_rank(groups.size());
  std::iota(by_rank.begin(), by_rank.end(), 0);
  std::sort(by_rank.begin(), by_rank.end(), [&](int a, int b) { return groups[a].first < groups[b].first; });
  for (int k : by_rank) {
    LlmGroup group;
    group.ranks.resize(groups[k].size);
    std::iota(group.ranks.begin(), group.ranks.end(), groups[k].first);
    group.samples = std::move(samples[k]);
    if (k < static_cast<int>(micro_batch_ends.size()) && !micro_batch_ends[k].empty()) {
      group.micro_batch_ends = micro_batch_ends[k];
      group.micro_batches = static_cast<int>(group.micro_batch_ends.size());
    } else {
      fit_micro_batches(group, costs, cost);
    }
    plan.llm_groups.push_back(std::move(group));
  }
  return plan;
}

StepPlan assemble_plan(const std::string& policy, Placement placement, const std::vector<RankRange>& groups,
                       std::vector<std::vector<int>> samples, std::vector<int> encoder_ranks,
                       const GlobalBatch& batch, const BatchCosts& costs, const CostModel& cost,
                       double locality_tolerance, const std::vector<std::vector<int>>& micro_batch_ends) {
  StepPlan plan =
      assemble_groups(policy, placement, groups, std::move(samples), costs, cost, micro_batch_ends);
  std::vector<int> preferred_rank(batch.samples.size(), -1);
  for (const LlmGroup& group : plan.llm_groups)
    for (int s : group.samples) preferred_rank[s] = group.ranks.front();
  plan.item_owner = balance_items(batch, cost, encoder_ranks, preferred_rank, locality_tolerance);
  plan.encoder_ranks = std::move(encoder_ranks);
  return plan;
}

}  // namespace minimllm::planning
