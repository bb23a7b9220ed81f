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
// per update and range query. Loads only grow.
class LoadTree {
 public:
  explicit LoadTree(int slots);
  double load(int slot) const { return load_[leaves_ + slot]; }
  int argmin() const { return slot_[1]; }
  double min_load() const { return load_[1]; }
  int argmin(int first, int last) const;  // least-loaded slot in [first, last); requires first < last
  void add(int slot, double amount);

 private:
  void pull(int node);  // node = the lesser of its children
  int leaves_;
  std::vector<double> load_;
  std::vector<int> slot_;
};

// Indices 0..n-1 sorted by decreasing key, ties by increasing index (a counting sort when the keys are
// small non-negative integers, as tokens and patches are).
std::vector<int> order_by_decreasing(const std::vector<int>& key);

}  // namespace minimllm::planning
