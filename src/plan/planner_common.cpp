#include "planner_common.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <tuple>

#include "minimllm/plan/rank_work.hpp"

namespace minimllm::planning {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

// ---------------------------------------------------------------------------------------------------
// LoadTree

LoadTree::LoadTree(int slots) : leaves_(1) {
  while (leaves_ < slots) leaves_ *= 2;
  load_.assign(2 * leaves_, kInf);
  slot_.assign(2 * leaves_, INT_MAX);
  for (int i = 0; i < slots; ++i) load_[leaves_ + i] = 0.0, slot_[leaves_ + i] = i;
  for (int i = leaves_ - 1; i >= 1; --i) pull(i);
}

void LoadTree::pull(int node) {
  // The left child holds the lower slots, so it wins ties.
  const int l = 2 * node, r = l + 1;
  const bool right = load_[r] < load_[l];
  load_[node] = right ? load_[r] : load_[l];
  slot_[node] = right ? slot_[r] : slot_[l];
}

int LoadTree::argmin(int first, int last) const {
  std::pair<double, int> best{kInf, INT_MAX};
  const auto consider = [&](int node) { best = std::min(best, std::make_pair(load_[node], slot_[node])); };
  if (last - first <= 16) {  // a node's ranks: scanning the leaves beats walking the tree
    for (int i = first; i < last; ++i) consider(leaves_ + i);
    return best.second;
  }
  for (int l = first + leaves_, r = last + leaves_; l < r; l /= 2, r /= 2) {
    if (l & 1) consider(l++);
    if (r & 1) consider(--r);
  }
  return best.second;
}

void LoadTree::add(int slot, double amount) {
  // Climb with the running minimum in registers (no reload of what was just stored); stop where a node
  // keeps its value, as everything above it then does too.
  int i = leaves_ + slot;
  double load = (load_[i] += amount);
  for (; i > 1; i /= 2) {
    const int sibling = i ^ 1;
    const bool sibling_wins = (i & 1) ? load_[sibling] <= load : load_[sibling] < load;  // left wins ties
    if (sibling_wins) load = load_[sibling], slot = slot_[sibling];
    const int parent = i / 2;
    if (load_[parent] == load && slot_[parent] == slot) break;
    load_[parent] = load;
    slot_[parent] = slot;
  }
}

// ---------------------------------------------------------------------------------------------------
// Per-sample costs

std::vector<int> order_by_decreasing(const std::vector<int>& key) {
  const int n = static_cast<int>(key.size());
  std::vector<int> order(n);
  if (n == 0) return order;
  const auto [lo, hi] = std::minmax_element(key.begin(), key.end());
  if (*lo >= 0 && *hi <= 4 * n + 4096) {
    // Counting sort: bucket starts in decreasing key order; stable, so ties keep increasing index.
    std::vector<int> start(*hi + 2, 0);
    for (int k : key) ++start[*hi - k + 1];
    for (int k = 1; k <= *hi + 1; ++k) start[k] += start[k - 1];
    for (int i = 0; i < n; ++i) order[start[*hi - key[i]]++] = i;
    return order;
  }
  std::vector<std::pair<int, int>> records(n);  // (-key, index): in cache, unlike sorting indices
  for (int i = 0; i < n; ++i) records[i] = {-key[i], i};
  std::sort(records.begin(), records.end());
  for (int i = 0; i < n; ++i) order[i] = records[i].second;
  return order;
}

BatchCosts batch_costs(const GlobalBatch& batch, const CostModel& cost) {
  BatchCosts costs;
  const size_t n = batch.samples.size();
  std::vector<int> tokens(n);
  costs.tokens.resize(n);
  costs.llm.resize(n);
  for (size_t s = 0; s < n; ++s) {
    tokens[s] = batch.samples[s].tokens();
    costs.max_tokens = std::max(costs.max_tokens, tokens[s]);
    costs.tokens[s] = tokens[s];
    costs.llm[s] = cost.llm(costs.tokens[s]);
    costs.total_llm += costs.llm[s];
  }
  costs.by_llm = order_by_decreasing(tokens);  // the LLM time grows with tokens
  return costs;
}

double llm_lower_bound(double total_llm, double largest_tokens, const CostModel& cost, int ranks) {
  // The largest sample is the slowest on every group size (the time grows with tokens).
  double best = kInf;
  for (int g = 1; g <= ranks; ++g)
    best = std::min(best, cost.llm_time_spanning(largest_tokens, g, g > cost.ranks_per_node));
  return std::max(total_llm / ranks, best);
}

// ---------------------------------------------------------------------------------------------------
// Samples to groups

int assign_samples(const BatchCosts& costs, const std::vector<int>& order,
                   const std::vector<RankRange>& groups, const CostModel& cost,
                   std::vector<std::vector<int>>& samples, std::vector<double>& loads) {
  struct Class {
    int size = 1;
    double capacity = 0.0;
    double inverse_size = 1.0, comm_fixed = 0.0, comm_per_token = 0.0;  // time = llm / g + comm(tokens)
    std::vector<int> members;                                           // group indices
    double time(double llm, double tokens) const {
      return llm * inverse_size + comm_fixed + comm_per_token * tokens;
    }
  };
  // Classes in increasing (size, spans): on equal finish times the smaller group wins.
  std::map<std::pair<int, bool>, int> class_of;
  for (const RankRange& g : groups)
    class_of.emplace(std::make_pair(g.size, cost.spans_nodes(g.first, g.size)), 0);
  std::vector<Class> classes;
  for (auto& [key, index] : class_of) {
    const auto [size, spans] = key;
    index = static_cast<int>(classes.size());
    // The communication is linear in tokens (cost_model.hpp): two evaluations give its coefficients.
    const double fixed = cost.llm_comm(0.0, size, spans);
    classes.push_back(
        {size, cost.token_capacity(size), 1.0 / size, fixed, cost.llm_comm(1.0, size, spans) - fixed, {}});
  }
  for (size_t k = 0; k < groups.size(); ++k)
    classes[class_of.at({groups[k].size, cost.spans_nodes(groups[k].first, groups[k].size)})]
        .members.push_back(static_cast<int>(k));
  std::vector<LoadTree> trees;
  for (const Class& c : classes) {
    trees.emplace_back(static_cast<int>(c.members.size()));
    for (size_t i = 0; i < c.members.size(); ++i) trees.back().add(static_cast<int>(i), loads[c.members[i]]);
  }
  // If no class can hold a sample, the largest capacity is the best effort.
  const auto roomiest = std::max_element(classes.begin(), classes.end(), [](const Class& a, const Class& b) {
    return a.capacity < b.capacity || (a.capacity == b.capacity && a.size < b.size);
  });
  const int fallback = static_cast<int>(roomiest - classes.begin());

  int overflowing = 0;
  for (int s : order) {
    const double llm = costs.llm[s], tokens = costs.tokens[s];
    int best = -1;
    double best_finish = kInf;
    for (size_t c = 0; c < classes.size(); ++c) {
      if (classes[c].capacity < tokens) continue;
      const double finish = trees[c].min_load() + classes[c].time(llm, tokens);
      if (finish < best_finish) best = static_cast<int>(c), best_finish = finish;
    }
    if (best < 0) ++overflowing, best = fallback;
    const double time = classes[best].time(llm, tokens);
    const int slot = trees[best].argmin();
    const int k = classes[best].members[slot];
    trees[best].add(slot, time);
    samples[k].push_back(s);
    loads[k] += time;
  }
  return overflowing;
}

int refine_assignment(const BatchCosts& costs, const std::vector<RankRange>& groups, const CostModel& cost,
                      const std::vector<char>& movable, std::vector<std::vector<int>>& samples,
                      std::vector<double>& loads, int max_moves) {
  const int n_groups = static_cast<int>(groups.size());
  if (n_groups < 2) return 0;
  // Classes of interchangeable groups (size, spans), each with a least-loaded tree, as in assign_samples;
  // one tree over all groups on negated loads finds the slowest.
  std::map<std::pair<int, bool>, int> class_of;
  std::vector<int> class_of_group(n_groups), slot_of_group(n_groups);
  std::vector<std::vector<int>> members;
  for (int k = 0; k < n_groups; ++k) {
    const auto key = std::make_pair(groups[k].size, cost.spans_nodes(groups[k].first, groups[k].size));
    const auto [it, added] = class_of.emplace(key, static_cast<int>(members.size()));
    if (added) members.emplace_back();
    class_of_group[k] = it->second;
    slot_of_group[k] = static_cast<int>(members[it->second].size());
    members[it->second].push_back(k);
  }
  std::vector<LoadTree> least;
  std::vector<double> capacity;
  for (const std::vector<int>& m : members) {
    least.emplace_back(static_cast<int>(m.size()));
    capacity.push_back(cost.token_capacity(groups[m.front()].size));
    for (size_t i = 0; i < m.size(); ++i) least.back().add(static_cast<int>(i), loads[m[i]]);
  }
  LoadTree most(n_groups);
  for (int k = 0; k < n_groups; ++k) most.add(k, -loads[k]);
  const auto time_on = [&](int s, int k) {
    return cost.llm_time(costs.tokens[s], groups[k].size, groups[k].first);
  };
  const auto update = [&](int k, double amount) {
    loads[k] += amount;
    least[class_of_group[k]].add(slot_of_group[k], amount);
    most.add(k, -amount);
  };

  int moves = 0;
  for (; moves < max_moves; ++moves) {
    const int k = most.argmin();
    const double top = loads[k];
    // A move of sample i to group j, or a swap with sample back (>= 0) of j.
    int best_index = -1, best_to = -1, best_back = -1;
    double best_top = top * (1.0 - 1e-9);  // must lower the slowest group's finish
    for (size_t c = 0; c < members.size(); ++c) {
      const int j = members[c][least[c].argmin()];
      if (j == k) continue;
      for (size_t i = 0; i < samples[k].size(); ++i) {
        const int s = samples[k][i];
        if (!movable[s] || capacity[c] < costs.tokens[s]) continue;
        const double rest = top - time_on(s, k), there = time_on(s, j);
        const double moved = std::max(rest, loads[j] + there);
        if (moved < best_top) best_top = moved, best_index = static_cast<int>(i), best_to = j, best_back = -1;
        for (size_t b = 0; b < samples[j].size(); ++b) {
          const int u = samples[j][b];
          if (!movable[u] || costs.tokens[u] >= costs.tokens[s] ||
              cost.token_capacity(groups[k].size) < costs.tokens[u])
            continue;
          const double swapped = std::max(rest + time_on(u, k), loads[j] - time_on(u, j) + there);
          if (swapped < best_top)
            best_top = swapped, best_index = static_cast<int>(i), best_to = j,
            best_back = static_cast<int>(b);
        }
      }
    }
    if (best_index < 0) break;
    const int s = samples[k][best_index];
    samples[k].erase(samples[k].begin() + best_index);
    update(k, -time_on(s, k));
    if (best_back >= 0) {
      const int u = samples[best_to][best_back];
      samples[best_to].erase(samples[best_to].begin() + best_back);
      update(best_to, -time_on(u, best_to));
      samples[k].push_back(u);
      update(k, time_on(u, k));
    }
    samples[best_to].push_back(s);
    update(best_to, time_on(s, best_to));
  }
  return moves;
}

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
  std::vector<int> patches, node_of_image, stage_of_image;  // node of the image's LLM group, -1: none
  std::vector<double> time;
  int stages = 1;
  for (size_t s = 0; s < batch.samples.size(); ++s) {
    const int node = preferred_rank[s] >= 0 ? cost.node_of(preferred_rank[s]) : -1;
    const int stage = stage_of_sample.empty() ? 0 : stage_of_sample[s];
    stages = std::max(stages, stage + 1);
    for (const ImageMeta& image : batch.samples[s].images) {
      patches.push_back(image.patches);
      node_of_image.push_back(node < nodes ? node : -1);
      stage_of_image.push_back(stage);
      time.push_back(cost.encoder_time(image.patches));
    }
  }
  std::vector<double> stage_total(stages, 0.0);
  for (size_t i = 0; i < time.size(); ++i) stage_total[stage_of_image[i]] += time[i];

  // Largest first, stage by stage (a stable bucketing of the decreasing order), each stage on fresh loads.
  const std::vector<int> order = order_by_decreasing(patches);  // the encoder time grows with patches
  std::vector<int> start(stages + 1, 0), by_stage(order.size());
  for (int i : order) ++start[stage_of_image[i] + 1];
  for (int m = 0; m < stages; ++m) start[m + 1] += start[m];
  std::vector<int> fill(start.begin(), start.end() - 1);
  for (int i : order) by_stage[fill[stage_of_image[i]]++] = i;
  std::vector<int> owner(time.size());
  for (int m = 0; m < stages; ++m) {
    const double slack = tolerance * stage_total[m] / e;
    LoadTree loads(e);
    for (int next = start[m]; next < start[m + 1]; ++next) {
      const int i = by_stage[next];
      int pos = loads.argmin();
      const int node = node_of_image[i];
      if (node >= 0 && node_of_position[pos] != node && node_begin[node] < node_begin[node + 1]) {
        const int local = loads.argmin(node_begin[node], node_begin[node + 1]);
        if (loads.load(local) <= loads.load(pos) + slack) pos = local;
      }
      loads.add(pos, time[i]);
      owner[i] = encoder_ranks[pos];
    }
  }
  return owner;
}

std::vector<double> sample_encoder_times(const GlobalBatch& batch, const CostModel& cost) {
  std::vector<double> times(batch.samples.size(), 0.0);
  for (size_t s = 0; s < batch.samples.size(); ++s)
    for (const ImageMeta& image : batch.samples[s].images) times[s] += cost.encoder_time(image.patches);
  return times;
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
// Micro-batches

namespace {

// Deals samples (largest first) into `parts` blocks of the executor's fixed counts (micro_batch_begin), each
// onto the block with the fewest tokens that still has room. Returns the blocks' largest token sum and the
// order.
double deal_blocks(const std::vector<int>& samples, const BatchCosts& costs, int parts,
                   std::vector<int>& order) {
  const int n = static_cast<int>(samples.size());
  std::vector<int> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = static_cast<int>(costs.tokens[samples[i]]);
  std::vector<std::vector<int>> blocks(parts);
  std::vector<int> room(parts);
  LoadTree load(parts);
  for (int b = 0; b < parts; ++b)
    room[b] = micro_batch_begin(n, b + 1, parts) - micro_batch_begin(n, b, parts);
  for (int b = 0; b < parts; ++b)
    if (room[b] == 0) load.add(b, kInf);
  double worst = 0.0;
  for (int i : order_by_decreasing(tokens)) {
    const int b = load.argmin();
    blocks[b].push_back(samples[i]);
    load.add(b, tokens[i]);
    worst = std::max(worst, load.load(b));
    if (--room[b] == 0) load.add(b, kInf);  // full
  }
  order.clear();
  for (const auto& block : blocks) order.insert(order.end(), block.begin(), block.end());
  return worst;
}

}  // namespace

void fit_micro_batches(LlmGroup& group, const BatchCosts& costs, const CostModel& cost) {
  const int n = static_cast<int>(group.samples.size());
  group.micro_batches = 1;
  const double capacity = cost.token_capacity(static_cast<int>(group.ranks.size()));
  double total = 0.0;
  for (int s : group.samples) total += costs.tokens[s];
  if (n <= 1 || total <= capacity) return;
  std::vector<int> order;
  for (int parts = std::max(2, static_cast<int>(std::ceil(total / capacity))); parts < n; ++parts) {
    if (deal_blocks(group.samples, costs, parts, order) <= capacity) {
      group.samples = order;
      group.micro_batches = parts;
      return;
    }
  }
  group.micro_batches = n;  // one sample per micro-batch: the most memory can allow
}

std::vector<int> stage_of_samples(const std::vector<LlmGroup>& groups, int samples, int* stages) {
  std::vector<int> stage(samples, 0);
  int most = 1;
  for (const LlmGroup& group : groups) most = std::max(most, group.micro_batches);
  for (const LlmGroup& group : groups) {
    const int n = static_cast<int>(group.samples.size()), parts = group.micro_batches;
    for (int m = 0; m < parts; ++m)
      for (int i = micro_batch_begin(n, m, parts); i < micro_batch_begin(n, m + 1, parts); ++i)
        stage[group.samples[i]] = pipeline_stage(m, parts, most);
  }
  if (stages) *stages = most;
  return stage;
}

void sort_by_encoder_share(std::vector<LlmGroup>& groups, const std::vector<double>& llm_time,
                           const std::vector<double>& encoder_time) {
  for (LlmGroup& group : groups)
    std::sort(group.samples.begin(), group.samples.end(), [&](int a, int b) {
      const double ra = encoder_time[a] * llm_time[b], rb = encoder_time[b] * llm_time[a];
      return ra != rb ? ra < rb : llm_time[a] != llm_time[b] ? llm_time[a] > llm_time[b] : a < b;
    });
}

void reorder_into_stages(std::vector<LlmGroup>& groups, int stages, const BatchCosts& costs,
                         const std::vector<double>& llm_time, const CostModel& cost) {
  std::vector<int> room, order;
  std::vector<double> load;
  for (LlmGroup& group : groups) {
    const int n = static_cast<int>(group.samples.size());
    int parts = std::max(1, std::min(stages, n));
    if (cost.capacity_bytes > 0.0) {
      LlmGroup fitted = group;  // the fewest micro-batches memory allows
      fit_micro_batches(fitted, costs, cost);
      parts = std::max(parts, fitted.micro_batches);
    }
    group.micro_batches = parts;
    if (parts == 1) continue;
    // Block m holds positions [micro_batch_begin(m), micro_batch_begin(m + 1)) of the group's list.
    room.assign(parts, 0);
    load.assign(parts, 0.0);
    for (int m = 0; m < parts; ++m)
      room[m] = micro_batch_begin(n, m + 1, parts) - micro_batch_begin(n, m, parts);
    order.assign(n, -1);
    // The last block, then the first, take the samples with the least encoder work per LLM time.
    int next = 0;
    for (int m : {parts - 1, 0})
      for (int i = micro_batch_begin(n, m, parts); i < micro_batch_begin(n, m + 1, parts); ++i)
        order[i] = group.samples[next++];
    // The middle blocks: the rest by LPT on LLM time (longest first onto the least-loaded block with room).
    std::vector<int> rest(group.samples.begin() + next, group.samples.end());
    std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return llm_time[a] > llm_time[b]; });
    for (int s : rest) {
      int best = -1;
      for (int m = 1; m + 1 < parts; ++m)
        if (room[m] > 0 && (best < 0 || load[m] < load[best])) best = m;
      order[micro_batch_begin(n, best + 1, parts) - room[best]--] = s;
      load[best] += llm_time[s];
    }
    group.samples = order;
    if (cost.capacity_bytes > 0.0) {
      for (int m = 0; m < parts; ++m) {
        double tokens = 0.0;
        const int begin = micro_batch_begin(n, m, parts), end = micro_batch_begin(n, m + 1, parts);
        for (int i = begin; i < end; ++i) tokens += costs.tokens[group.samples[i]];
        if (tokens > cost.token_capacity(static_cast<int>(group.ranks.size())) && end - begin > 1) {
          fit_micro_batches(group, costs, cost);
          break;
        }
      }
    }
  }
}

double pipeline_estimate(const std::vector<LlmGroup>& groups, const std::vector<double>& llm_time,
                         const std::vector<double>& encoder_time, int encoder_ranks) {
  int stages = 1;
  for (const LlmGroup& group : groups) stages = std::max(stages, group.micro_batches);
  const size_t n_groups = groups.size();
  // Per stage: encoder work of an encoder rank (spread evenly); per group and stage: LLM and encoder work.
  std::vector<double> stage_encoder(stages, 0.0), group_llm(n_groups * stages, 0.0),
      group_encoder(n_groups * stages, 0.0);
  const double forward_share = 1.0 / 3.0, per_rank = 1.0 / encoder_ranks;
  for (size_t k = 0; k < n_groups; ++k) {
    const LlmGroup& group = groups[k];
    const int n = static_cast<int>(group.samples.size()), parts = group.micro_batches;
    for (int m = 0; m < parts; ++m) {
      const int stage = pipeline_stage(m, parts, stages);
      for (int i = micro_batch_begin(n, m, parts); i < micro_batch_begin(n, m + 1, parts); ++i) {
        const int s = group.samples[i];
        stage_encoder[stage] += encoder_time[s] * per_rank;
        group_encoder[k * stages + stage] += encoder_time[s];
        group_llm[k * stages + stage] += llm_time[s];
      }
    }
  }
  std::vector<double> ready(stages), group_end(n_groups, 0.0);
  double forward = 0.0;
  for (int position = 0; position < stages; ++position) {
    const int m = forward_stage(position, stages);
    ready[m] = forward += forward_share * stage_encoder[m];
  }
  double encoder_end = forward, llm_end = 0.0;
  for (int m = 0; m < stages; ++m) {
    double stage_end = 0.0;  // the last group with images in this stage
    for (size_t k = 0; k < n_groups; ++k) {
      const bool images = group_encoder[k * stages + m] > 0.0;
      group_end[k] = (images ? std::max(group_end[k], ready[m]) : group_end[k]) + group_llm[k * stages + m];
      llm_end = std::max(llm_end, group_end[k]);
      if (images) stage_end = std::max(stage_end, group_end[k]);
    }
    encoder_end = std::max(encoder_end, stage_end) + (1.0 - forward_share) * stage_encoder[m];
  }
  return std::max(llm_end, encoder_end);
}

// ---------------------------------------------------------------------------------------------------
// Plans

StepPlan assemble_plan(const std::string& policy, Placement placement, const std::vector<RankRange>& groups,
                       std::vector<std::vector<int>> samples, std::vector<int> encoder_ranks,
                       const GlobalBatch& batch, const BatchCosts& costs, const CostModel& cost,
                       double locality_tolerance) {
  StepPlan plan;
  plan.policy = policy;
  plan.placement = placement;
  // Groups in rank order, for readable plans.
  std::vector<int> by_rank(groups.size());
  std::iota(by_rank.begin(), by_rank.end(), 0);
  std::sort(by_rank.begin(), by_rank.end(), [&](int a, int b) { return groups[a].first < groups[b].first; });
  std::vector<int> preferred_rank(batch.samples.size(), -1);
  for (int k : by_rank) {
    LlmGroup group;
    group.ranks.resize(groups[k].size);
    std::iota(group.ranks.begin(), group.ranks.end(), groups[k].first);
    group.samples = std::move(samples[k]);
    fit_micro_batches(group, costs, cost);
    for (int s : group.samples) preferred_rank[s] = groups[k].first;
    plan.llm_groups.push_back(std::move(group));
  }
  plan.image_owner = balance_images(batch, cost, encoder_ranks, preferred_rank, locality_tolerance);
  plan.encoder_ranks = std::move(encoder_ranks);
  return plan;
}

// ---------------------------------------------------------------------------------------------------
// Target-driven layouts

namespace {

// Time of samples with summed one-rank compute `work`, tokens and count on one group of g ranks that
// spans nodes iff g > ranks_per_node: (work - k) / g + const, with k the bandwidth term's limit.
struct RunTime {
  double scaled, fixed;  // time(g) = scaled / g + fixed for g >= 2
};
RunTime run_time(const CostModel& cost, double work, double tokens, double count, bool spans) {
  const LinkCost& l = cost.link(spans);
  const double bandwidth_term = cost.kv_bytes_per_token * tokens / l.bandwidth;
  return {work - bandwidth_term, count * cost.collectives_per_sample * l.latency + bandwidth_term};
}

double group_time(const CostModel& cost, double work, double tokens, double count, int g) {
  if (g == 1) return work;
  const RunTime t = run_time(cost, work, tokens, count, g > cost.ranks_per_node);
  return t.scaled / g + t.fixed;
}

// Smallest g in [min_g, max_g] whose group time meets `target`; max_g + 1 if none. O(1): solve
// scaled / g + fixed <= target on the node-local sizes, then on the spanning ones.
int ranks_for_target(const CostModel& cost, double work, double tokens, double count, double target,
                     int min_g, int max_g) {
  if (min_g <= 1 && work <= target) return 1;
  const auto solve = [&](bool spans, int lo, int hi) {
    if (lo > hi) return -1;
    const RunTime t = run_time(cost, work, tokens, count, spans);
    const auto meets = [&](int g) { return t.scaled / g + t.fixed <= target; };
    if (t.scaled <= 0.0) return meets(lo) ? lo : -1;  // the time only grows with g
    if (target <= t.fixed) return -1;
    const double g = std::max<double>(lo, std::ceil(t.scaled / (target - t.fixed) - 1e-9));
    if (g > hi) return -1;
    int gi = static_cast<int>(g);
    if (!meets(gi)) ++gi;  // floating-point rounding of the ceiling
    return gi <= hi && meets(gi) ? gi : -1;
  };
  const int lo = std::max(2, min_g);
  const int local = solve(false, lo, std::min(cost.ranks_per_node, max_g));
  if (local > 0) return local;
  const int spanning = solve(true, std::max(lo, cost.ranks_per_node + 1), max_g);
  return spanning > 0 ? spanning : max_g + 1;
}

int round_to_rule(SizeRule rule, int g, const CostModel& cost, double work, double tokens, double count,
                  double target, int max_g) {
  if (rule == SizeRule::any || g > max_g) return g;
  // Next power of two that still meets the target (a larger one may cross a node and lose bandwidth).
  int p = 1;
  while (p < g) p *= 2;
  for (; p <= max_g; p *= 2)
    if (group_time(cost, work, tokens, count, p) <= target * (1.0 + 1e-12)) return p;
  return max_g + 1;
}

// Smallest group size g <= max_g whose token_capacity holds `tokens` (max_g if none).
class CapacityTable {
 public:
  CapacityTable(const CostModel& cost, int max_g) : unlimited_(cost.capacity_bytes <= 0.0) {
    if (unlimited_) return;
    best_up_to_.resize(max_g + 1, 0.0);
    for (int g = 1; g <= max_g; ++g) best_up_to_[g] = std::max(best_up_to_[g - 1], cost.token_capacity(g));
  }
  int smallest_group(double tokens) const {
    if (unlimited_) return 1;
    const auto it = std::lower_bound(best_up_to_.begin() + 1, best_up_to_.end(), tokens);
    return it == best_up_to_.end() ? static_cast<int>(best_up_to_.size()) - 1
                                   : static_cast<int>(it - best_up_to_.begin());
  }

 private:
  bool unlimited_;
  std::vector<double> best_up_to_;  // best_up_to_[g] = max over g' <= g of token_capacity(g')
};

struct Demand {
  long long ranks = 0;
  int long_samples = 0;                   // the prefix of by_llm that the runs cover
  std::vector<int> sizes;                 // one group per run
  std::vector<std::pair<int, int>> runs;  // [begin, end) positions in by_llm
};

class TargetSearch {
 public:
  TargetSearch(SizeRule rule, int ranks, const BatchCosts& costs, const CostModel& cost)
      : rule_(rule), ranks_(ranks), costs_(costs), cost_(cost), capacity_(cost, ranks) {
    // Run lengths the DP tries: every length up to 8, then 1.5x apart (plus the whole prefix, below).
    for (int l = 1; l <= static_cast<int>(costs.by_llm.size()); l = l < 8 ? l + 1 : (3 * l + 1) / 2)
      run_lengths_.push_back(l);
    const size_t n = costs.by_llm.size();
    work_.assign(n + 1, 0.0);
    tokens_.assign(n + 1, 0.0);
    for (size_t i = 0; i < n; ++i) {
      work_[i + 1] = work_[i] + costs.llm[costs.by_llm[i]];
      tokens_[i + 1] = tokens_[i] + costs.tokens[costs.by_llm[i]];
    }
  }

  Demand demand(double target) const { return cut_runs(target, long_prefix(target)); }

  // Smallest target (to a relative 1e-3) whose demand fits the ranks, by bisection from the lower bound
  // (the target is usually within ~10% of it, hence the first bracket).
  double smallest_target() const {
    if (costs_.by_llm.empty()) return 0.0;
    double lo = llm_lower_bound(costs_.total_llm, costs_.max_tokens, cost_, ranks_);
    if (demand(lo).ranks <= ranks_) return lo;
    double hi = 1.125 * lo;
    for (int i = 0; i < 64 && demand(hi).ranks > ranks_; ++i) lo = hi, hi *= 2.0;
    for (int i = 0; i < 40 && hi - lo > 1e-3 * hi; ++i) {
      const double mid = 0.5 * (lo + hi);
      (demand(mid).ranks <= ranks_ ? hi : lo) = mid;
    }
    return hi;
  }

 private:
  // Long samples are a prefix of by_llm (time and tokens both fall along it): those that miss the
  // target on one rank or do not fit its memory.
  int long_prefix(double target) const {
    const auto is_short = [&](int i) {
      const int s = costs_.by_llm[i];
      return costs_.llm[s] <= target && capacity_.smallest_group(costs_.tokens[s]) == 1;
    };
    int lo = 0, hi = static_cast<int>(costs_.by_llm.size());
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (is_short(mid)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }

  // The DP over run cuttings of the long prefix, minimising the ranks of its groups; then the short
  // samples fill the groups' spare time, g (T - time), and ranks of their own.
  Demand cut_runs(double target, int long_samples) const {
    Demand d;
    d.long_samples = long_samples;
    const int n = static_cast<int>(costs_.by_llm.size());
    const long long too_many = static_cast<long long>(ranks_) + 1;
    std::vector<long long> best(long_samples + 1, too_many);
    std::vector<int> from(long_samples + 1, -1), size(long_samples + 1, 0);
    best[0] = 0;
    for (int i = 1; i <= long_samples; ++i) {
      const auto try_run = [&](int j) {
        if (best[j] >= too_many) return true;
        const int g = run_ranks(j, i, target);
        if (g > ranks_) return false;  // a longer run needs at least as many ranks
        if (best[j] + g < best[i]) best[i] = best[j] + g, from[i] = j, size[i] = g;
        return true;
      };
      bool whole_prefix_tried = false;
      for (int l : run_lengths_) {
        if (l > i || !try_run(i - l)) break;
        whole_prefix_tried = l == i;
      }
      if (!whole_prefix_tried) try_run(0);  // all long samples in one group
    }
    if (best[long_samples] >= too_many) {
      d.ranks = too_many;
      return d;
    }
    double spare = 0.0;
    for (int i = long_samples; i > 0; i = from[i]) {
      d.runs.emplace_back(from[i], i);
      d.sizes.push_back(size[i]);
      spare += size[i] * (target - run_time(from[i], i, size[i]));
    }
    std::reverse(d.runs.begin(), d.runs.end());
    std::reverse(d.sizes.begin(), d.sizes.end());
    const double short_work = std::max(0.0, work_[n] - work_[long_samples] - spare);
    d.ranks = best[long_samples] + static_cast<long long>(std::ceil(short_work / target));
    return d;
  }

  double run_time(int begin, int end, int g) const {
    return group_time(cost_, work_[end] - work_[begin], tokens_[end] - tokens_[begin], end - begin, g);
  }

  int run_ranks(int begin, int end, double target) const {
    const double work = work_[end] - work_[begin], tokens = tokens_[end] - tokens_[begin],
                 count = end - begin;
    const int min_g = capacity_.smallest_group(costs_.tokens[costs_.by_llm[begin]]);  // the run's largest
    const int g = ranks_for_target(cost_, work, tokens, count, target, min_g, ranks_);
    return round_to_rule(rule_, g, cost_, work, tokens, count, target, ranks_);
  }

  SizeRule rule_;
  int ranks_;
  std::vector<int> run_lengths_;
  const BatchCosts& costs_;
  const CostModel& cost_;
  CapacityTable capacity_;
  std::vector<double> work_, tokens_;  // prefix sums along by_llm
};

// Long runs pinned to their groups, short samples by earliest finish.
LayoutChoice layout_for(const Demand& d, int ranks, const BatchCosts& costs, const CostModel& cost) {
  LayoutChoice choice;
  choice.groups = place_groups(d.sizes, 0, ranks, cost.ranks_per_node);
  choice.samples.resize(choice.groups.size());
  choice.pinned.assign(costs.tokens.size(), 0);
  std::vector<double> loads(choice.groups.size(), 0.0);
  for (size_t k = 0; k < d.runs.size(); ++k)
    for (int i = d.runs[k].first; i < d.runs[k].second; ++i) {
      const int s = costs.by_llm[i];
      choice.pinned[s] = 1;
      choice.samples[k].push_back(s);
      loads[k] += cost.llm_time(costs.tokens[s], choice.groups[k].size, choice.groups[k].first);
    }
  const std::vector<int> rest(costs.by_llm.begin() + d.long_samples, costs.by_llm.end());
  choice.overflowing = assign_samples(costs, rest, choice.groups, cost, choice.samples, loads);
  choice.llm_makespan = loads.empty() ? 0.0 : *std::max_element(loads.begin(), loads.end());
  return choice;
}

}  // namespace

LayoutChoice best_target_layout(const std::vector<SizeRule>& rules, int ranks, const BatchCosts& costs,
                                const CostModel& cost) {
  LayoutChoice best;
  bool found = false;
  const auto consider = [&](LayoutChoice choice) {
    if (!found ||
        std::tie(choice.overflowing, choice.llm_makespan) < std::tie(best.overflowing, best.llm_makespan))
      best = std::move(choice), found = true;
  };
  const auto good_enough = [&](double makespan) {
    return found && best.overflowing == 0 && best.llm_makespan <= makespan;
  };
  std::set<std::vector<int>> tried;  // group sizes already evaluated (rules often agree)
  for (SizeRule rule : rules) {
    const TargetSearch search(rule, ranks, costs, cost);
    const double target = search.smallest_target();
    // A looser target (fewer, smaller groups) only while the best layout is slower than that target: a
    // layout planned for T rarely finishes much before T.
    for (double looser : {1.0, 1.05, 1.1, 1.2, 1.4}) {
      if (target <= 0.0 || good_enough(looser * target)) break;
      const Demand d = search.demand(target * looser);
      if (d.ranks > ranks || d.sizes.empty() || !tried.insert(d.sizes).second) continue;
      LayoutChoice choice = layout_for(d, ranks, costs, cost);
      choice.target = target * looser;
      consider(std::move(choice));
    }
  }
  // The all-singleton layout (plain LPT), unless it cannot win: it is never faster than the largest
  // sample on one rank.
  if (costs.by_llm.empty() || !good_enough(costs.llm[costs.by_llm.front()]))
    consider(layout_for(Demand{}, ranks, costs, cost));
  // Local search on the winner's short samples (the long runs stay on the groups cut for them).
  std::vector<double> loads(best.groups.size(), 0.0);
  for (size_t k = 0; k < best.groups.size(); ++k)
    for (int s : best.samples[k])
      loads[k] += cost.llm_time(costs.tokens[s], best.groups[k].size, best.groups[k].first);
  std::vector<char> movable(best.pinned.size());
  for (size_t s = 0; s < movable.size(); ++s) movable[s] = !best.pinned[s];
  refine_assignment(costs, best.groups, cost, movable, best.samples, loads,
                    static_cast<int>(best.groups.size()));
  best.llm_makespan = loads.empty() ? 0.0 : *std::max_element(loads.begin(), loads.end());
  return best;
}

}  // namespace minimllm::planning
