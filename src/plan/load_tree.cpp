#include "load_tree.hpp"

#include <algorithm>
#include <climits>
#include <utility>

namespace minimllm::planning {

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
  if (last - first <= 16) {  // a node's ranks: scanning the leaves (in slot order: first wins ties)
    int best = first;
    for (int i = first + 1; i < last; ++i)
      if (load_[leaves_ + i] < load_[leaves_ + best]) best = i;
    return best;
  }
  std::pair<double, int> best{kInf, INT_MAX};
  const auto consider = [&](int node) { best = std::min(best, std::make_pair(load_[node], slot_[node])); };
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

}  // namespace minimllm::planning
