#include "node_locality.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "load_tree.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/planning/plan_traffic.hpp"
#include "placement.hpp"

namespace minimllm::planning {
namespace {

// Bundles to places (nodes, or ranks of one node): `weight` lists (bytes, bundle, place) for every pair
// with bytes > 0; `room[place]` is how many bundles a place takes. Heaviest pair first; the bundles left
// then fill the places left, both in increasing index. Returns the place of each bundle.
std::vector<int> assign_greedily(std::vector<std::tuple<double, int, int>> weight, int bundle_count,
                                 std::vector<int> room) {
  std::sort(weight.begin(), weight.end(), [](const auto& a, const auto& b) {
    return std::get<0>(a) != std::get<0>(b)
               ? std::get<0>(a) > std::get<0>(b)
               : std::tie(std::get<1>(a), std::get<2>(a)) < std::tie(std::get<1>(b), std::get<2>(b));
  });
  std::vector<int> place(bundle_count, -1);
  for (const auto& [bytes, bundle, where] : weight)
    if (place[bundle] < 0 && room[where] > 0) place[bundle] = where, --room[where];
  for (int b = 0, where = 0; b < bundle_count; ++b) {
    if (place[b] >= 0) continue;
    while (room[where] == 0) ++where;
    place[b] = where, --room[where];
  }
  return place;
}

// (bytes, bundle, key) for every bundle and every key in [0, keys) its items' places map to (-1: none).
template <typename KeyOf>
std::vector<std::tuple<double, int, int>> bytes_by(const std::vector<std::vector<int>>& bundles,
                                                   const std::vector<int>& members,
                                                   const std::vector<double>& bytes,
                                                   const std::vector<int>& loader, int keys, KeyOf key_of) {
  std::vector<std::tuple<double, int, int>> weight;
  std::vector<double> per_key(keys, 0.0);  // one bundle's bytes by key; touched lists the keys it reached
  std::vector<int> touched;
  for (size_t i = 0; i < members.size(); ++i) {
    for (int s : bundles[members[i]]) {
      const int key = key_of(loader[s]);
      if (key < 0 || bytes[s] <= 0.0) continue;
      if (per_key[key] == 0.0) touched.push_back(key);
      per_key[key] += bytes[s];
    }
    std::sort(touched.begin(), touched.end());
    for (int key : touched) {
      if (per_key[key] > 0.0) weight.emplace_back(per_key[key], static_cast<int>(i), key);
      per_key[key] = 0.0;
    }
    touched.clear();
  }
  return weight;
}

// Images balanced node-wise, a sample's images kept together where balance allows: the samples' images
// over the nodes as whole bundles (balance_over_nodes, home: the sample's LLM node); then over each node's
// ranks, first whole samples, largest first, each onto the node's least-loaded rank while that rank stays
// within the node's mean load, then the other samples' images one by one by LPT; then each rank's items
// (a whole sample's images, or one image), as one bundle, to the rank nearest their samples' LLM ranks
// (place_bundles_near_loaders). Returns each image's rank.
std::vector<int> balance_images_node_wise(const GlobalBatch& batch, const CostModel& cost,
                                          const std::vector<int>& llm_rank,
                                          const std::vector<int>& ranks_of_node) {
  const int n = static_cast<int>(batch.samples.size()), nodes = static_cast<int>(ranks_of_node.size());
  const int per_node = cost.ranks_per_node;
  const std::vector<int> first_item = first_item_of_samples(batch);
  const auto item_of = [&](int s, int i) -> const EncoderItem& {
    return batch.samples[s].items[i - first_item[s]];
  };
  const auto bytes_of = [&](const EncoderItem& item) {
    return (cost.encoders.at(item.module).input_bytes_per_row + cost.boundary_bytes_per_row) * item.rows;
  };
  // Per sample (no per-image arrays: most images are placed with their sample): its images' encoder time
  // and bytes, and its home node.
  std::vector<double> bundle(n, 0.0), bundle_bytes(n, 0.0);
  std::vector<int> home(n);
  for (int s = 0; s < n; ++s) {
    home[s] = cost.node_of(llm_rank[s]);
    for (int i = first_item[s]; i < first_item[s + 1]; ++i) {
      bundle[s] += cost.encoder_time(item_of(s, i));
      bundle_bytes[s] += bytes_of(item_of(s, i));
    }
  }
  // Largest first, ties in index order (a sample's images move with it: bytes grow with its work).
  const std::vector<int> largest_first = order_by_decreasing(bundle);
  const std::vector<int> node_of_sample = balance_over_nodes(bundle, home, ranks_of_node, largest_first);

  std::vector<double> node_total(nodes, 0.0);
  for (int s = 0; s < n; ++s) node_total[node_of_sample[s]] += bundle[s];
  std::vector<LoadTree> rank_loads;
  for (int node = 0; node < nodes; ++node) rank_loads.emplace_back(ranks_of_node[node]);
  std::vector<std::vector<int>> items(std::accumulate(ranks_of_node.begin(), ranks_of_node.end(), 0));
  std::vector<int> item_begin, item_end, item_near;  // an item: images item_begin[k] .. item_end[k] - 1
  std::vector<double> item_bytes;
  const auto place = [&](int s, double load, double bytes, int begin, int end) {
    const int node = node_of_sample[s], slot = rank_loads[node].argmin();
    rank_loads[node].add(slot, load);
    items[node * per_node + slot].push_back(static_cast<int>(item_begin.size()));
    item_begin.push_back(begin), item_end.push_back(end), item_near.push_back(llm_rank[s]);
    item_bytes.push_back(bytes);
  };
  std::vector<int> split, split_rows, sample_of_split;
  for (int s : largest_first) {
    if (first_item[s] == first_item[s + 1]) continue;
    const int node = node_of_sample[s];
    if (rank_loads[node].min_load() + bundle[s] <= node_total[node] / ranks_of_node[node]) {
      place(s, bundle[s], bundle_bytes[s], first_item[s], first_item[s + 1]);
      continue;
    }
    for (int i = first_item[s]; i < first_item[s + 1]; ++i)
      split.push_back(i), split_rows.push_back(item_of(s, i).rows), sample_of_split.push_back(s);
  }
  for (int j : order_by_decreasing(split_rows)) {
    const EncoderItem& item = item_of(sample_of_split[j], split[j]);
    place(sample_of_split[j], cost.encoder_time(item), bytes_of(item), split[j], split[j] + 1);
  }

  place_bundles_near_loaders(items, 0, item_near, item_bytes, per_node);
  std::vector<int> owner(first_item.back(), 0);
  for (size_t r = 0; r < items.size(); ++r)
    for (int k : items[r])
      std::fill(owner.begin() + item_begin[k], owner.begin() + item_end[k], static_cast<int>(r));
  return owner;
}

}  // namespace

void place_bundles_near_loaders(std::vector<std::vector<int>>& bundles, int first_rank,
                                const std::vector<int>& loader, const std::vector<double>& bytes,
                                int ranks_per_node) {
  const int count = static_cast<int>(bundles.size());
  if (count < 2) return;
  const int first_node = first_rank / ranks_per_node;
  const int nodes = (first_rank + count - 1) / ranks_per_node - first_node + 1;
  std::vector<int> node_room(nodes, 0), all(count);
  for (int i = 0; i < count; ++i) ++node_room[(first_rank + i) / ranks_per_node - first_node], all[i] = i;
  // Each loader rank's place among the nodes (-1: none of them), looked up once per item, not divided.
  const int most = loader.empty() ? 0 : *std::max_element(loader.begin(), loader.end());
  std::vector<int> place_of_rank(most + 1);
  for (int r = 0; r <= most; ++r) {
    const int node = r / ranks_per_node - first_node;
    place_of_rank[r] = node >= 0 && node < nodes ? node : -1;
  }
  const std::vector<int> node_of_bundle = assign_greedily(
      bytes_by(bundles, all, bytes, loader, nodes, [&](int r) { return r >= 0 ? place_of_rank[r] : -1; }),
      count, node_room);

  std::vector<std::vector<int>> placed(count), on_node(nodes);
  for (int b = 0; b < count; ++b) on_node[node_of_bundle[b]].push_back(b);
  for (int node = 0; node < nodes; ++node) {
    const std::vector<int>& members = on_node[node];
    const int begin = std::max(first_rank, (first_node + node) * ranks_per_node);  // the node's first rank
    std::vector<int> rank_room(node_room[node], 1);
    const std::vector<int> slot = assign_greedily(
        bytes_by(bundles, members, bytes, loader, node_room[node],
                 [&](int r) { return r >= begin && r < begin + node_room[node] ? r - begin : -1; }),
        static_cast<int>(members.size()), rank_room);
    for (size_t i = 0; i < members.size(); ++i)
      placed[begin - first_rank + slot[i]] = std::move(bundles[members[i]]);
  }
  bundles = std::move(placed);
}

std::vector<int> balance_over_nodes(const std::vector<double>& cost, const std::vector<int>& home,
                                    const std::vector<int>& ranks_of_node,
                                    const std::vector<int>& stay_order) {
  const int nodes = static_cast<int>(ranks_of_node.size());
  const double ranks = std::accumulate(ranks_of_node.begin(), ranks_of_node.end(), 0.0);
  const double total = std::accumulate(cost.begin(), cost.end(), 0.0);
  std::vector<int> node(cost.size(), -1);
  std::vector<double> kept(nodes, 0.0);
  std::vector<int> moving;
  for (int i : stay_order) {
    const int n = home[i];
    if (kept[n] + cost[i] <= total * ranks_of_node[n] / ranks * (1.0 + 1e-12)) {
      node[i] = n, kept[n] += cost[i];
    } else {
      moving.push_back(i);
    }
  }
  const auto larger = [&](int a, int b) { return cost[a] != cost[b] ? cost[a] > cost[b] : a < b; };
  if (!std::is_sorted(moving.begin(), moving.end(), larger)) std::sort(moving.begin(), moving.end(), larger);
  LoadTree per_rank(nodes);  // load per rank of each node
  for (int n = 0; n < nodes; ++n) per_rank.add(n, kept[n] / ranks_of_node[n]);
  for (int i : moving) {
    const int n = per_rank.argmin();
    node[i] = n;
    per_rank.add(n, cost[i] / ranks_of_node[n]);
  }
  return node;
}

namespace {

// Ranks 0 .. world - 1 cut into consecutive blocks of `block` (the last one shorter): each block's size.
std::vector<int> block_sizes(int world, int block) {
  std::vector<int> sizes((world + block - 1) / block);
  for (size_t b = 0; b < sizes.size(); ++b) sizes[b] = std::min(block, world - static_cast<int>(b) * block);
  return sizes;
}

}  // namespace

NodeWiseLayout node_wise_balance(const GlobalBatch& batch, const BatchCosts& costs, const CostModel& cost,
                                 int world, int group_size) {
  const int n = static_cast<int>(batch.samples.size()), per_node = cost.ranks_per_node, g = group_size;
  if (g < 1 || world % g != 0)
    throw std::invalid_argument(
        fmt::format("node_wise_balance: groups of {} ranks do not divide the {} ranks", g, world));
  // Domains of whole groups, balanced first: the nodes when groups fit in them, else each group that spans
  // nodes (a multiple of a node), else (groups straddling node boundaries) the whole world.
  const int domain = per_node % g == 0 ? per_node : (g % per_node == 0 ? g : world);
  const std::vector<int> ranks_of_domain = block_sizes(world, domain);
  const int domains = static_cast<int>(ranks_of_domain.size());
  NodeWiseLayout out;
  out.groups.resize(world / g);
  for (int k = 0; k < world / g; ++k) out.groups[k] = {k * g, g};

  // Samples: over the domains, then over each domain's groups, then refined over all groups.
  std::vector<int> loader(n), home(n), loader_group(n);
  std::vector<double> bytes(n);
  for (int s = 0; s < n; ++s) {
    loader[s] = sample_loader_rank(s, n, world);
    home[s] = loader[s] / domain;
    loader_group[s] = loader[s] / g;
    bytes[s] = sample_input_bytes(batch.samples[s], cost);
  }
  // Samples that would move the most bytes per unit of work stay first (ties: lower index).
  std::vector<std::pair<double, int>> by_density(n);
  for (int s = 0; s < n; ++s) by_density[s] = {costs.llm[s] > 0.0 ? -bytes[s] / costs.llm[s] : -kInf, s};
  std::sort(by_density.begin(), by_density.end());
  std::vector<int> stay_order(n);
  for (int i = 0; i < n; ++i) stay_order[i] = by_density[i].second;
  const std::vector<int> domain_of_sample = balance_over_nodes(costs.llm, home, ranks_of_domain, stay_order);
  std::vector<std::vector<int>> order(domains);  // each domain's samples, largest first
  for (int s : costs.by_llm) order[domain_of_sample[s]].push_back(s);
  const int groups = static_cast<int>(out.groups.size());
  out.samples.assign(groups, {});
  std::vector<double> loads(groups, 0.0);
  for (int d = 0; d < domains; ++d) {
    const int first = d * domain / g, count = ranks_of_domain[d] / g;
    const std::vector<RankRange> local(out.groups.begin() + first, out.groups.begin() + first + count);
    std::vector<std::vector<int>> samples(local.size());
    std::vector<double> local_loads(local.size(), 0.0);
    assign_samples(costs, order[d], local, cost, samples, local_loads);
    for (int i = 0; i < count; ++i)
      out.samples[first + i] = std::move(samples[i]), loads[first + i] = local_loads[i];
  }
  refine_assignment(costs, out.groups, cost, std::vector<char>(n, 1), out.samples, loads, groups);
  place_bundles_near_loaders(out.samples, 0, loader_group, bytes, domain / g);

  // Images over the ranks of the real nodes: home = their sample's LLM node (its group's first rank).
  std::vector<int> llm_rank(n, 0);
  for (int k = 0; k < groups; ++k)
    for (int s : out.samples[k]) llm_rank[s] = out.groups[k].first;
  out.item_owner = balance_images_node_wise(batch, cost, llm_rank, block_sizes(world, per_node));
  return out;
}

}  // namespace minimllm::planning
