#include "load_tree.hpp"

#include <algorithm>
#include <cassert>
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

void LoadTree::add(int slot, double amount) { set(slot, load(slot) + amount); }

void LoadTree::set(int slot, double load) {
  // Climb with the running minimum in registers (no reload of what was just stored); stop where a node
  // keeps its value, as everything above it then does too. The winner is selected without a branch: which
  // child wins is data-dependent, so a branch would mispredict about every other level.
  int i = leaves_ + slot;
  load_[i] = load;
  for (; i > 1; i /= 2) {
    const int sibling = i ^ 1;
    const double sibling_load = load_[sibling];
    const int sibling_slot = slot_[sibling];
    // A left sibling (i odd) wins ties: it holds the lower slots.
    const int sibling_wins =
        static_cast<int>(sibling_load < load) | ((i & 1) & static_cast<int>(sibling_load == load));
    slot = sibling_wins ? sibling_slot : slot;
    load = std::min(load, sibling_load);  // on a tie both are the same value
    const int parent = i / 2;
    if (load_[parent] == load && slot_[parent] == slot) break;
    load_[parent] = load;
    slot_[parent] = slot;
  }
}

namespace {

constexpr int kBlockSlots = 16;

int block_count(const std::vector<int>& node_begin) {
  int blocks = 0;
  for (size_t n = 0; n + 1 < node_begin.size(); ++n)
    blocks += (node_begin[n + 1] - node_begin[n] + kBlockSlots - 1) / kBlockSlots;
  return blocks;
}

}  // namespace

NodeLoads::NodeLoads(const std::vector<int>& node_begin)
    : node_begin_(node_begin), load_(node_begin.back(), 0.0), blocks_(std::max(1, block_count(node_begin))) {
  block_of_.resize(node_begin.back());
  for (size_t n = 0; n + 1 < node_begin.size(); ++n) {
    first_block_of_node_.push_back(static_cast<int>(block_begin_.size()));
    for (int slot = node_begin[n]; slot < node_begin[n + 1]; slot += kBlockSlots)
      block_begin_.push_back(slot);
  }
  first_block_of_node_.push_back(static_cast<int>(block_begin_.size()));
  block_begin_.push_back(node_begin.back());
  const int blocks = static_cast<int>(block_begin_.size()) - 1;
  block_min_.assign(blocks, 0.0);
  block_argmin_.resize(blocks);
  for (int b = 0; b < blocks; ++b) {
    block_argmin_[b] = block_begin_[b];
    for (int slot = block_begin_[b]; slot < block_begin_[b + 1]; ++slot) block_of_[slot] = b;
  }
  if (blocks == 0) blocks_.set(0, kInf);  // no slots: nothing to choose
}

int NodeLoads::argmin() {
  assert(!block_min_.empty() && "NodeLoads::argmin with no slots");
  // The tree's least block holds a lower bound; once that bound is the block's real minimum, every other
  // block is at least as loaded (their bounds are no lower), and lower blocks with the same load would
  // have won the tie.
  for (;;) {
    const int block = blocks_.argmin();
    if (blocks_.load(block) == block_min_[block]) return block_argmin_[block];
    blocks_.set(block, block_min_[block]);
  }
}

namespace {

// Indices sorted by decreasing key, ties by increasing index, by comparison: (-key, index) records, which
// sort in cache, unlike indices compared through the keys.
template <typename Key>
std::vector<int> sort_by_decreasing(const std::vector<Key>& key) {
  const int n = static_cast<int>(key.size());
  std::vector<std::pair<Key, int>> records(n);
  for (int i = 0; i < n; ++i) records[i] = {-key[i], i};
  std::sort(records.begin(), records.end());
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = records[i].second;
  return order;
}

}  // namespace

std::vector<int> order_by_decreasing(const std::vector<int>& key) {
  const int n = static_cast<int>(key.size());
  std::vector<int> order(n);
  if (n == 0) return order;
  const auto [lo, hi] = std::minmax_element(key.begin(), key.end());
  if (*lo >= 0 && counting_sort_fits(*hi + 1LL, n)) {
    // Counting sort: bucket starts in decreasing key order; stable, so ties keep increasing index.
    std::vector<int> start(*hi + 2, 0);
    for (int k : key) ++start[*hi - k + 1];
    for (int k = 1; k <= *hi + 1; ++k) start[k] += start[k - 1];
    for (int i = 0; i < n; ++i) order[start[*hi - key[i]]++] = i;
    return order;
  }
  return sort_by_decreasing(key);
}

std::vector<int> order_by_decreasing(const std::vector<double>& key) { return sort_by_decreasing(key); }

}  // namespace minimllm::planning
