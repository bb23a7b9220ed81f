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

std::vector<int> balance_images(const GlobalBatch& batch, const CostModel& cost,
                                const std::vector<int>& encoder_ranks, const std::vector<int>& preferred_rank,
                                double tolerance, const std::vector<int>& stage_of_sample) {
  const int e = static_cast<int>(encoder_ranks.size());
  // Encoder ranks are sorted, so the ranks of one node are a contiguous range of positions.
  const int nodes = cost.node_of(encoder_ranks.back()) + 1;
  std::vector<int> node_begin(nodes + 1), node_of_position(e);
  for (int pos = 0; pos < e; ++pos) node_of_position[pos] = cost.node_of(encoder_ranks[pos]);
  for (int node = 0, pos = 0; node <= nodes; ++node) {
    while (pos < e && node_of_position[pos] < node) ++pos;
    node_begin[node] = pos;
  }
  // Placement order: stage by stage, largest first (the encoder time grows with patches), ties in image
  // order. Two walks over the images: the first counts them by (stage, patches), the second writes each
  // straight to its place (a counting sort; a comparison sort where patches range too widely).
  int stages = 1, most_patches = 0, images = 0;
  for (size_t s = 0; s < batch.samples.size(); ++s) {
    if (!stage_of_sample.empty()) stages = std::max(stages, stage_of_sample[s] + 1);
    for (const ImageMeta& image : batch.samples[s].images)
      most_patches = std::max(most_patches, image.patches), ++images;
  }
  const auto stage_of = [&](size_t s) { return stage_of_sample.empty() ? 0 : stage_of_sample[s]; };
  const long long keys = static_cast<long long>(stages) * (most_patches + 1);
  const bool counting = counting_sort_fits(keys, images);
  std::vector<int> next_of_key;           // counting: the next place of each key, stage-major, largest first
  std::vector<int> place_of_image;        // otherwise: each image's place
  std::vector<int> start(stages + 1, 0);  // each stage's first place
  if (counting) {
    next_of_key.assign(keys + 1, 0);
    for (size_t s = 0; s < batch.samples.size(); ++s) {
      const long long base = static_cast<long long>(stage_of(s)) * (most_patches + 1) + most_patches;
      for (const ImageMeta& image : batch.samples[s].images) ++next_of_key[base - image.patches + 1];
    }
    for (long long k = 1; k <= keys; ++k) next_of_key[k] += next_of_key[k - 1];
    for (int m = 0; m <= stages; ++m) start[m] = next_of_key[static_cast<long long>(m) * (most_patches + 1)];
  } else {
    std::vector<std::tuple<int, int, int>> records;  // (stage, -patches, image)
    records.reserve(images);
    for (size_t s = 0, i = 0; s < batch.samples.size(); ++s)
      for (const ImageMeta& image : batch.samples[s].images)
        records.emplace_back(stage_of(s), -image.patches, static_cast<int>(i++));
    std::sort(records.begin(), records.end());
    place_of_image.resize(images);
    for (int next = 0; next < images; ++next) {
      place_of_image[std::get<2>(records[next])] = next;
      ++start[std::get<0>(records[next]) + 1];
    }
    for (int m = 0; m < stages; ++m) start[m + 1] += start[m];
  }
  // The images in placement order with what the loop reads of them, so that it walks memory in order;
  // each stage's encoder time summed in image order.
  struct Item {
    double time;
    int node, image;  // node of the image's LLM group, -1: none
  };
  std::vector<Item> items(images);
  std::vector<double> stage_total(stages, 0.0);
  for (size_t s = 0, i = 0; s < batch.samples.size(); ++s) {
    const int preferred_node = preferred_rank[s] >= 0 ? cost.node_of(preferred_rank[s]) : -1;
    const int node = preferred_node < nodes ? preferred_node : -1;
    const int stage = stage_of(s);
    const long long base = static_cast<long long>(stage) * (most_patches + 1) + most_patches;
    double total = stage_total[stage];  // in a register through the sample's images: the same sums
    for (const ImageMeta& image : batch.samples[s].images) {
      const double time = cost.encoder_time(image.patches);
      total += time;
      const int next = counting ? next_of_key[base - image.patches]++ : place_of_image[i];
      items[next] = {time, node, static_cast<int>(i++)};
    }
    stage_total[stage] = total;
  }
  std::vector<int> owner(images);
  for (int m = 0; m < stages; ++m) {
    const double slack = tolerance * stage_total[m] / e;
    NodeLoads loads(node_begin);
    for (int next = start[m]; next < start[m + 1]; ++next) {
      const Item& item = items[next];
      // The least-loaded position of the image's node, unless it is more than the slack above the least
      // loaded of all (when that is on the node, the two are the same position).
      int pos;
      if (item.node >= 0 && loads.has_slots(item.node)) {
        pos = loads.argmin_in(item.node);
        if (loads.load(pos) > loads.min_lower_bound() + slack) {  // else certainly within the slack
          const int least = loads.argmin();
          if (loads.load(pos) > loads.load(least) + slack) pos = least;
        }
      } else {
        pos = loads.argmin();
      }
      loads.add(pos, item.time);
      owner[item.image] = encoder_ranks[pos];
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
  plan.image_owner = balance_images(batch, cost, encoder_ranks, preferred_rank, locality_tolerance);
  plan.encoder_ranks = std::move(encoder_ranks);
  return plan;
}

}  // namespace minimllm::planning
