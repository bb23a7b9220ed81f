#include "baselines.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "minimllm/config/input_error.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/planning/memory_fit.hpp"

namespace minimllm::planning {
namespace {

std::vector<int> divisors(int n) {
  std::vector<int> low, high;
  for (int d = 1; static_cast<long long>(d) * d <= n; ++d)
    if (n % d == 0) {
      low.push_back(d);
      if (d != n / d) high.push_back(n / d);
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

// Smallest power of two >= x (x >= 1).
long long next_power_of_two(long long x) {
  long long p = 1;
  while (p < x) p *= 2;
  return p;
}

// A group's samples, in order, as micro-batches: packed bins of at most `capacity` tokens.
void pack_group(LlmGroup& group, const BatchCosts& costs, double capacity) {
  group.micro_batch_ends = pack_in_order(group.samples, costs.tokens, capacity);
  group.micro_batches = std::max<int>(1, group.micro_batch_ends.size());
}

StepPlan colocated_plan(const char* policy, std::vector<LlmGroup> groups, const GlobalBatch& batch,
                        int world_size) {
  StepPlan plan;
  plan.policy = policy;
  plan.llm_groups = std::move(groups);
  plan.encoder_ranks = consecutive_ranks(0, world_size);
  place_items_with_groups(plan, batch);
  return plan;
}

}  // namespace

int token_budget(int tokens_per_rank, int cp, int max_tokens, const CostModel& cost) {
  if (tokens_per_rank > 0) return tokens_per_rank;
  const double memory = std::floor(cost.token_capacity(cp) / cp);
  return std::max(1, static_cast<int>(std::min<double>((max_tokens + cp - 1) / cp, memory)));
}

std::vector<int> pack_in_order(const std::vector<int>& samples, const std::vector<double>& tokens,
                               double capacity) {
  std::vector<int> ends;
  double open = 0.0;
  for (size_t i = 0; i < samples.size(); ++i) {
    const double t = tokens[samples[i]];
    if (i > 0 && open + t > capacity) {
      ends.push_back(static_cast<int>(i));
      open = 0.0;
    }
    open += t;
  }
  if (!samples.empty()) ends.push_back(static_cast<int>(samples.size()));
  return ends;
}

void require_cp_divides(const char* policy, int cp, int world_size) {
  if (cp < 1 || world_size % cp != 0)
    throw InputError(
        fmt::format("{}: parallel.cp = {} must divide the {} ranks (they form ranks / cp "
                    "data-parallel replicas); valid: {}",
                    policy, cp, world_size, fmt::join(divisors(world_size), ", ")));
}

std::vector<LlmGroup> megatron_static_groups(const GlobalBatch& batch, const BatchCosts& costs,
                                             const CostModel& cost, int world_size, int cp,
                                             int tokens_per_rank) {
  require_cp_divides("static", cp, world_size);
  const int budget = token_budget(tokens_per_rank, cp, costs.max_tokens, cost);
  const double bin_tokens = static_cast<double>(cp) * budget;
  for (size_t s = 0; s < costs.tokens.size(); ++s) {
    if (costs.tokens[s] > cost.token_capacity(cp))
      throw DoesNotFit(fmt::format(
          "static: sample {} of step {} has {} tokens; the memory of parallel.cp = {} ranks holds {:.0f} "
          "tokens per micro-batch ({}); a sample is never split across bins: raise parallel.cp",
          s, batch.step, costs.tokens[s], cp, std::floor(cost.token_capacity(cp)), memory_summary(cost)));
    if (costs.tokens[s] > bin_tokens)
      throw InputError(fmt::format(
          "static: sample {} of step {} has {} tokens, more than a bin of parallel.cp ({}) x "
          "parallel.tokens_per_rank ({}) = {} tokens; a sample is never split across bins: raise "
          "parallel.tokens_per_rank or parallel.cp (tokens_per_rank 0 derives the budget from the longest "
          "sample)",
          s, batch.step, costs.tokens[s], cp, budget, bin_tokens));
  }
  const int replicas = world_size / cp;
  std::vector<int> in_order(costs.tokens.size());
  for (size_t s = 0; s < in_order.size(); ++s) in_order[s] = static_cast<int>(s);
  const std::vector<int> ends =
      pack_in_order(in_order, costs.tokens, std::min(bin_tokens, cost.token_capacity(cp)));
  std::vector<std::vector<int>> bins;
  for (size_t b = 0, begin = 0; b < ends.size(); begin = ends[b++])
    bins.emplace_back(in_order.begin() + begin, in_order.begin() + ends[b]);
  // Every replica runs as many micro-batches: split the last sample off the last bins holding more than
  // one, from the end, until the count divides (Megatron-LM's naive packing scheduler). With fewer
  // samples than that needs, counts still differ by at most one.
  if (bins.size() % replicas != 0) {
    size_t to_move = replicas - bins.size() % replicas;
    for (int i = static_cast<int>(bins.size()) - 1; to_move > 0 && i >= 0;) {
      if (bins[i].size() > 1) {
        const int s = bins[i].back();
        bins[i].pop_back();
        bins.push_back({s});
        --to_move;
      } else {
        --i;
      }
    }
  }
  std::vector<LlmGroup> groups(replicas);
  for (int j = 0; j < replicas; ++j) groups[j].ranks = consecutive_ranks(j * cp, cp);
  for (size_t k = 0; k < bins.size(); ++k) {  // bin k: replica k mod replicas, micro-batch k / replicas
    LlmGroup& group = groups[k % replicas];
    group.samples.insert(group.samples.end(), bins[k].begin(), bins[k].end());
    group.micro_batch_ends.push_back(static_cast<int>(group.samples.size()));
  }
  for (LlmGroup& group : groups) group.micro_batches = std::max<int>(1, group.micro_batch_ends.size());
  return groups;
}

StepPlan megatron_static_plan(const GlobalBatch& batch, const BatchCosts& costs, const CostModel& cost,
                              int world_size, int cp, int tokens_per_rank) {
  return static_plan_of(megatron_static_groups(batch, costs, cost, world_size, cp, tokens_per_rank), batch,
                        world_size);
}

StepPlan static_plan_of(std::vector<LlmGroup> groups, const GlobalBatch& batch, int world_size) {
  StepPlan plan = colocated_plan("static", std::move(groups), batch, world_size);
  plan.origin.source = "static_layout";
  return plan;
}

double static_makespan_lower_bound(const std::vector<LlmGroup>& groups, const BatchCosts& costs,
                                   const std::vector<double>& encoder_time) {
  double encoder = 0.0, llm = 0.0;
  for (const LlmGroup& group : groups) {
    double group_encoder = 0.0, group_llm = 0.0;
    for (int s : group.samples) group_encoder += encoder_time[s], group_llm += costs.llm[s];
    const double size = static_cast<double>(group.ranks.size());
    encoder = std::max(encoder, group_encoder / size), llm = std::max(llm, group_llm / size);
  }
  return encoder + llm;
}

StepPlan megatron_dcp_plan(const GlobalBatch& batch, const BatchCosts& costs, const CostModel& cost,
                           int world_size, int budget) {
  const int n = static_cast<int>(costs.tokens.size());
  std::vector<int> need(n);
  std::vector<double> work(n);  // Megatron-LM's workload estimate: s^2 / group size
  for (int s = 0; s < n; ++s) {
    const long long ranks = (static_cast<long long>(costs.tokens[s]) + budget - 1) / budget;
    if (ranks > world_size)
      throw InputError(
          fmt::format("megatron_dcp: sample {} of step {} has {} tokens: at {} tokens per rank "
                      "(parallel.tokens_per_rank, or if 0 the longest sample / parallel.cp) it needs a "
                      "context-parallel group of {} ranks, more than the {} ranks; raise "
                      "parallel.tokens_per_rank or lower parallel.cp",
                      s, batch.step, costs.tokens[s], budget, ranks, world_size));
    // The next power of two, or the whole world (Megatron-LM's largest hybrid group); larger while the
    // group's memory cannot hold the sample (the gathered K|V of every layer does not shrink with g).
    need[s] = static_cast<int>(std::min<long long>(next_power_of_two(ranks), world_size));
    while (costs.tokens[s] > cost.token_capacity(need[s]) && need[s] < world_size)
      need[s] = std::min(2 * need[s], world_size);
    if (costs.tokens[s] > cost.token_capacity(need[s]))
      throw DoesNotFit(fmt::format(
          "megatron_dcp: sample {} of step {} has {} tokens; a group of all {} ranks holds {:.0f} tokens "
          "({})",
          s, batch.step, costs.tokens[s], world_size, std::floor(cost.token_capacity(world_size)),
          memory_summary(cost)));
    work[s] = costs.tokens[s] * costs.tokens[s] / need[s];
  }
  const std::vector<int>& order = costs.by_llm;  // longest first, ties by index (a stable sort)

  // Buckets of consecutive samples of about equal work, as many as distinct group sizes
  // (make_buckets_equal, reproduced as written, including its closing rule).
  std::vector<int> bucket_end;
  {
    const int k = static_cast<int>(std::set<int>(need.begin(), need.end()).size());
    double total = 0.0;
    for (double w : work) total += w;
    const double target = total / k;
    double open = 0.0;
    int remaining_k = k;
    for (int i = 0, begin = 0; i < n; ++i) {
      const double w = work[order[i]];
      if (i > begin &&
          (open + w > 1.1 * target || n - i <= remaining_k - static_cast<int>(bucket_end.size()))) {
        bucket_end.push_back(i);
        begin = i, open = 0.0, --remaining_k;
      }
      open += w;
    }
    if (n > 0) bucket_end.push_back(n);
  }

  // Groups are contiguous blocks in creation order; per size, (load, group) for least-loaded queries.
  struct Group {
    int size = 1;
    double load = 0.0;
    std::vector<int> samples;
  };
  std::vector<Group> groups;
  std::vector<std::set<std::pair<double, int>>> by_size(world_size + 1);
  int used = 0;
  const auto assign = [&](int g, int s, double load) {
    Group& group = groups[g];
    by_size[group.size].erase({group.load, g});
    group.load += load;
    group.samples.push_back(s);
    by_size[group.size].insert({group.load, g});
  };
  std::vector<int> head(bucket_end.size());
  for (size_t b = 0; b < head.size(); ++b) head[b] = b == 0 ? 0 : bucket_end[b - 1];
  for (;;) {
    // The head of the first bucket that has a group of its size or enough free ranks for a new one.
    int s = -1;
    for (size_t b = 0; b < head.size() && s < 0; ++b) {
      if (head[b] == bucket_end[b]) continue;
      const int candidate = order[head[b]];
      if (!by_size[need[candidate]].empty() || world_size - used >= need[candidate]) s = candidate, ++head[b];
    }
    if (s < 0) break;                    // Megatron-LM leaves the rest to a later round
    if (world_size - used >= need[s]) {  // free ranks carry no load: a new group always wins
      groups.push_back({need[s], 0.0, {}});
      by_size[need[s]].insert({0.0, static_cast<int>(groups.size()) - 1});
      used += need[s];
      assign(static_cast<int>(groups.size()) - 1, s, work[s]);
    } else {
      assign(by_size[need[s]].begin()->second, s, work[s]);
    }
  }
  // Ranks left empty: the first of the smallest groups doubles (or takes the whole world), pushing the
  // later groups along, while the free ranks suffice (fill_empty_gpus).
  while (used < world_size) {
    int smallest = 0;
    while (by_size[smallest].empty()) ++smallest;
    const int wider = std::min(2 * smallest, world_size);
    if (wider - smallest > world_size - used) break;  // the rest stay idle, as groups of one
    int g = by_size[smallest].begin()->second;
    for (const auto& [load, k] : by_size[smallest]) g = std::min(g, k);
    by_size[smallest].erase({groups[g].load, g});
    groups[g].load *= static_cast<double>(smallest) / wider;
    groups[g].size = wider;
    by_size[wider].insert({groups[g].load, g});
    used += wider - smallest;
  }
  // Samples no group of their size could take in this round (Megatron-LM runs them in a later round,
  // after a barrier): each joins the group of at least its size that finishes it first.
  for (size_t b = 0; b < head.size(); ++b)
    for (; head[b] < bucket_end[b]; ++head[b]) {
      const int s = order[head[b]];
      int best = -1;
      double best_end = 0.0;
      // Group sizes are powers of two, or the whole world once widened.
      for (int size = need[s];; size = std::min(2 * size, world_size)) {
        if (!by_size[size].empty()) {
          const auto [load, g] = *by_size[size].begin();
          const double end = load + costs.tokens[s] * costs.tokens[s] / size;
          if (best < 0 || end < best_end) best = g, best_end = end;
        }
        if (size == world_size) break;
      }
      assign(best, s, best_end - groups[best].load);
    }

  std::vector<LlmGroup> plan_groups;
  int first = 0;
  for (const Group& group : groups) {
    LlmGroup g;
    g.ranks = consecutive_ranks(first, group.size);
    g.samples = group.samples;
    pack_group(g, costs, std::min(static_cast<double>(group.size) * budget, cost.token_capacity(group.size)));
    plan_groups.push_back(std::move(g));
    first += group.size;
  }
  for (; first < world_size; ++first) plan_groups.push_back({{first}, {}, 1, {}});
  return colocated_plan("megatron_dcp", std::move(plan_groups), batch, world_size);
}

}  // namespace minimllm::planning
