#include "group_time.hpp"

#include <algorithm>
#include <cmath>

#include "load_tree.hpp"

namespace minimllm::planning {

GroupTimes::GroupTimes(const CostModel& cost, int ranks)
    : cost_(&cost),
      latency_(std::max(ranks, 1) + 1, 0.0),
      per_token_(latency_.size(), 0.0),
      least_latency_from_(latency_.size() + 1, kInf),
      least_per_token_from_(latency_.size() + 1, kInf),
      run_end_(latency_.size(), 0) {
  for (int g = 2; g <= ranks; ++g) {
    const bool spans = g > cost.ranks_per_node;
    latency_[g] = cost.llm_comm(0.0, g, spans);
    per_token_[g] = cost.llm_comm(1.0, g, spans) - latency_[g];
  }
  for (int g = ranks; g >= 2; --g) {
    least_latency_from_[g] = std::min(latency_[g], least_latency_from_[g + 1]);
    least_per_token_from_[g] = std::min(per_token_[g], least_per_token_from_[g + 1]);
  }
  for (int g = tabulated(); g >= 0; --g) {
    const bool same =
        g >= 2 && g < tabulated() && latency_[g + 1] == latency_[g] && per_token_[g + 1] == per_token_[g];
    run_end_[g] = same ? run_end_[g + 1] : g;
  }
}

double GroupTimes::with_collectives_of(int like, double work, double tokens, double count, int g) const {
  return work / g + count * latency_[like] + per_token_[like] * tokens;
}

double GroupTimes::lower_bound(int from, double work, double tokens, double count, int h) const {
  return work / h + count * least_latency_from_[from] + least_per_token_from_[from] * tokens;
}

double GroupTimes::operator()(double work, double tokens, double count, int g) const {
  if (g <= 1) return work;
  if (g <= tabulated()) return with_collectives_of(g, work, tokens, count, g);
  return group_time(*cost_, work, tokens, count, g);
}

double GroupTimes::fastest(double work, double tokens, double count, int min_g, int max_g) const {
  const bool falls = work >= 0.0 && tokens >= 0.0 && count >= 0.0;  // along a run: never rises
  double least = kInf;
  for (int g = std::max(min_g, 1); g <= max_g; ++g) {
    if (falls && g >= 2 && g <= tabulated()) {
      if (lower_bound(g, 0.0, tokens, count, 1) > least) {
        g = tabulated();  // no tabulated size from here on is faster
        continue;
      }
      g = std::min(run_end(g), max_g);
    }
    least = std::min(least, (*this)(work, tokens, count, g));
  }
  return least;
}

double group_time(const CostModel& cost, double work, double tokens, double count, int g) {
  if (g <= 1) return work;
  const bool spans = g > cost.ranks_per_node;
  const double latency = cost.llm_comm(0.0, g, spans);
  return work / g + count * latency + (cost.llm_comm(1.0, g, spans) - latency) * tokens;
}

namespace {

// First g in [a, b] where `meets` holds, for a predicate that holds from some size on; b + 1 if none. From
// a guess, galloping away from it and then bisecting: two evaluations when the guess is right.
template <class Meets>
int first_meeting(int a, int b, int guess, const Meets& meets) {
  int misses = a - 1, holds = b + 1;  // the bracket: meets(misses) is false, meets(holds) true
  guess = std::clamp(guess, a, b);
  if (meets(guess)) {
    holds = guess;
    for (int step = 1; holds - step > misses; step *= 2) {
      if (!meets(holds - step)) {
        misses = holds - step;
        break;
      }
      holds -= step;
    }
  } else {
    misses = guess;
    for (int step = 1; misses + step < holds; step *= 2) {
      if (meets(misses + step)) {
        holds = misses + step;
        break;
      }
      misses += step;
    }
  }
  while (holds - misses > 1) {
    const int mid = misses + (holds - misses) / 2;
    (meets(mid) ? holds : misses) = mid;
  }
  return holds;
}

}  // namespace

int ranks_for_target(const GroupTimes& times, double work, double tokens, double count, double target,
                     int min_g, int max_g) {
  int g = std::max(min_g, 1);
  if (g == 1 && max_g >= 1) {
    if (work <= target) return 1;  // the time on one rank
    g = 2;
  }
  // Every size before g misses the target.
  const int last = std::min(max_g, times.tabulated());
  if (work >= 0.0 && tokens >= 0.0 && count >= 0.0) {
    while (g <= last) {
      // Every size from g on is bounded from below by a time that falls with the size: the first size
      // where the bound meets the target is the first that may; along its run the time falls, so the
      // first size of the run meeting the target is the answer, else the run's end is passed.
      const int from = g;
      const double room = target - times.lower_bound(from, 0.0, tokens, count, 1);
      const double guess = room > 0.0 ? std::ceil(work / room) : kInf;  // work / g <= room
      g = first_meeting(from, last, guess < last ? static_cast<int>(guess) : last,
                        [&](int h) { return times.lower_bound(from, work, tokens, count, h) <= target; });
      if (g > last) break;
      const int end = std::min(times.run_end(g), last);
      const int like = g;
      g = first_meeting(like, end, like, [&](int h) {
        return times.with_collectives_of(like, work, tokens, count, h) <= target;
      });
      if (g <= end) return g;
    }
  }
  for (; g <= max_g; ++g)
    if (times(work, tokens, count, g) <= target) return g;
  return max_g + 1;
}

CapacityTable::CapacityTable(const CostModel& cost, int max_g, double tokens_per_rank)
    : unlimited_(!cost.bounded() && tokens_per_rank <= 0.0) {
  if (unlimited_) return;
  best_up_to_.resize(std::max(max_g, 1) + 1, 0.0);
  for (int g = 1; g <= max_g; ++g) {
    const double budget = tokens_per_rank > 0.0 ? g * tokens_per_rank : kInf;
    best_up_to_[g] = std::max(best_up_to_[g - 1], std::min(cost.token_capacity(g), budget));
  }
}

double CapacityTable::capacity(int g) const {
  if (unlimited_) return kInf;
  return best_up_to_[std::min<size_t>(static_cast<size_t>(std::max(g, 0)), best_up_to_.size() - 1)];
}

int CapacityTable::smallest_group(double tokens) const {
  if (unlimited_) return 1;
  const auto it = std::lower_bound(best_up_to_.begin() + 1, best_up_to_.end(), tokens);
  return it == best_up_to_.end() ? static_cast<int>(best_up_to_.size()) - 1
                                 : static_cast<int>(it - best_up_to_.begin());
}

}  // namespace minimllm::planning
