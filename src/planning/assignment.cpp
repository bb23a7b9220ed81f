#include "assignment.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "load_tree.hpp"

namespace minimllm::planning {

// ---------------------------------------------------------------------------------------------------
// Per-sample costs

BatchCosts batch_costs(const GlobalBatch& batch, const CostModel& cost) {
  BatchCosts costs;
  const size_t n = batch.samples.size();
  std::vector<int> tokens(n);
  costs.tokens.resize(n);
  costs.llm.resize(n);
  costs.encoder.assign(n, 0.0);
  for (size_t s = 0; s < n; ++s) {  // one walk over the images for both
    tokens[s] = batch.samples[s].text_len;
    for (const EncoderItem& image : batch.samples[s].items)
      tokens[s] += image.rows, costs.encoder[s] += cost.encoder_time(image);
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
  // Per move, each time a sample of the slowest group k or of a candidate group j would take, computed once
  // rather than once per pair of samples (planning time on long batches).
  std::vector<double> own_on_k, other_on_k, other_on_j;
  for (; moves < max_moves; ++moves) {
    const int k = most.argmin();
    const double top = loads[k];
    const double k_capacity = cost.token_capacity(groups[k].size);
    own_on_k.resize(samples[k].size());
    for (size_t i = 0; i < samples[k].size(); ++i) own_on_k[i] = time_on(samples[k][i], k);
    // A move of sample i to group j, or a swap with sample back (>= 0) of j.
    int best_index = -1, best_to = -1, best_back = -1;
    double best_top = top * (1.0 - 1e-9);  // must lower the slowest group's finish
    for (size_t c = 0; c < members.size(); ++c) {
      const int j = members[c][least[c].argmin()];
      if (j == k) continue;
      other_on_k.resize(samples[j].size()), other_on_j.resize(samples[j].size());
      for (size_t b = 0; b < samples[j].size(); ++b) {
        const int u = samples[j][b];
        const bool can_swap = movable[u] && k_capacity >= costs.tokens[u];
        other_on_k[b] = can_swap ? time_on(u, k) : 0.0;
        other_on_j[b] = can_swap ? time_on(u, j) : 0.0;
      }
      for (size_t i = 0; i < samples[k].size(); ++i) {
        const int s = samples[k][i];
        if (!movable[s] || capacity[c] < costs.tokens[s]) continue;
        const double rest = top - own_on_k[i], there = time_on(s, j);
        const double moved = std::max(rest, loads[j] + there);
        if (moved < best_top) best_top = moved, best_index = static_cast<int>(i), best_to = j, best_back = -1;
        for (size_t b = 0; b < samples[j].size(); ++b) {
          const int u = samples[j][b];
          if (!movable[u] || costs.tokens[u] >= costs.tokens[s] || k_capacity < costs.tokens[u]) continue;
          const double swapped = std::max(rest + other_on_k[b], loads[j] - other_on_j[b] + there);
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

}  // namespace minimllm::planning
