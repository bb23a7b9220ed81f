// The two primitives of the planners' list scheduling (internal): least-loaded slot queries (LoadTree)
// and the largest-first order (order_by_decreasing).
#pragma once

#include <limits>
#include <vector>

namespace minimllm::planning {

// A load no slot reaches: slots that must not be chosen (padding, full blocks) carry it.
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// Least-loaded slot queries over a fixed set of slots: a tournament tree whose nodes hold the least load
// below them and its slot (ties go to the lowest slot, which keeps every planner deterministic). O(log n)
// per update and range query.
class LoadTree {
 public:
  explicit LoadTree(int slots);
  double load(int slot) const { return load_[leaves_ + slot]; }
  int argmin() const { return slot_[1]; }
  double min_load() const { return load_[1]; }
  int argmin(int first, int last) const;  // least-loaded slot in [first, last); requires first < last
  void add(int slot, double amount);
  void set(int slot, double load);  // raised or lowered

 private:
  void pull(int node);  // node = the lesser of its children
  int leaves_;
  std::vector<double> load_;
  std::vector<int> slot_;
};

// Least-loaded queries over slots grouped into nodes (consecutive slot ranges), for placing many small
// items near a preferred node: each block (at most 16 consecutive slots of one node) keeps its exact
// minimum, and a LoadTree over blocks keeps each block's minimum as of the last time it was asked for, a
// lower bound since loads only grow (add takes amounts >= 0). An add rescans one block at most; the tree is
// brought up to date only where a global query meets a stale block. Same answers as one LoadTree over all
// slots (ties to the lowest slot), at a fraction of the cost when most items stay on their node.
class NodeLoads {
 public:
  explicit NodeLoads(const std::vector<int>& node_begin);  // node n: slots [node_begin[n], node_begin[n+1])
  double load(int slot) const { return load_[slot]; }
  bool has_slots(int node) const { return node_begin_[node] < node_begin_[node + 1]; }
  int argmin();  // least-loaded slot of all
  // Least-loaded slot of a node with slots.
  int argmin_in(int node) const {
    int best = first_block_of_node_[node];
    for (int b = best + 1; b < first_block_of_node_[node + 1]; ++b)
      if (block_min_[b] < block_min_[best]) best = b;
    return block_argmin_[best];
  }
  double min_lower_bound() const { return blocks_.min_load(); }  // <= load(argmin())
  void add(int slot, double amount) {
    load_[slot] += amount;
    const int block = block_of_[slot];
    if (block_argmin_[block] == slot) rescan(block);  // else the block's minimum is elsewhere, unchanged
  }

 private:
  void rescan(int block) {
    // Branch-free selection (which slot wins is data-dependent); strict: the lowest slot wins ties.
    int best = block_begin_[block];
    double least = load_[best];
    for (int slot = best + 1; slot < block_begin_[block + 1]; ++slot) {
      const double load = load_[slot];
      const bool less = load < least;
      best = less ? slot : best;
      least = less ? load : least;
    }
    block_argmin_[block] = best;
    block_min_[block] = least;
  }
  std::vector<int> node_begin_, block_begin_, block_of_, first_block_of_node_;
  std::vector<double> load_, block_min_;
  std::vector<int> block_argmin_;
  LoadTree blocks_;
};

// Whether n items with integer keys in [0, key_range) are sorted by counting (a bucket per key) rather than
// by comparison: while the buckets are not many more than the items.
inline bool counting_sort_fits(long long key_range, long long n) { return key_range <= 4 * n + 4097; }

// Indices 0..n-1 sorted by decreasing key, ties by increasing index (a counting sort when the keys are
// small non-negative integers, as tokens and patches are).
std::vector<int> order_by_decreasing(const std::vector<int>& key);
std::vector<int> order_by_decreasing(const std::vector<double>& key);  // a comparison sort

}  // namespace minimllm::planning
