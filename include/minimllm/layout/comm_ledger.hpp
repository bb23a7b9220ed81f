// The communicator pool's bookkeeping (parallel/comm_pool.hpp), on its own so that the simulator can play
// it for thousands of virtual ranks: which groups of two or more ranks have a communicator, and when one
// is created or evicted. The cap counts the communicators each rank holds (a rank holds one per live
// group it is a member of), not the groups in the world: a rank at its cap evicts its least recently used
// group before it joins another. A group is created and evicted on all its members at once (creation is
// collective over them), so an eviction one member needs drops the group on every member. Every rank
// feeds the ledger the same groups in the same order and so holds the same ledger.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

namespace minimllm {

class CommLedger {
 public:
  explicit CommLedger(int capacity);  // >= 1: communicators a rank may hold

  struct Use {
    bool hit = false;                       // the group was live: nothing created
    std::vector<std::vector<int>> evicted;  // live groups dropped to make room (every member)
  };
  // The group `ranks` (sorted, unique, two or more) is used now: a hit, or its creation after the
  // evictions its members need.
  Use use(const std::vector<int>& ranks);

  int held(int rank) const;  // communicators `rank` holds now
  std::size_t live_groups() const { return last_use_.size(); }
  int capacity() const { return capacity_; }

 private:
  using Group = std::map<std::vector<int>, std::uint64_t>::iterator;
  void touch(Group group, std::uint64_t tick);
  void evict(Group group);

  int capacity_;
  std::uint64_t clock_ = 0;
  std::map<std::vector<int>, std::uint64_t> last_use_;  // live groups, their last use
  // Each rank's live groups by last use (oldest first).
  std::unordered_map<int, std::set<std::pair<std::uint64_t, const std::vector<int>*>>> by_rank_;
};

// The groups a pool creates at start-up under parallel.comm_precreate: powers_of_two, as Megatron-LM's
// dynamic context parallelism does: for every power of two 2 <= size <= ranks, the aligned blocks [k size,
// (k + 1) size) of the ranks, smallest sizes first, and at most capacity - 1 sizes (each rank is in one
// block of each size), so that a step's other groups keep a slot. The planners place power-of-two groups
// from the largest on consecutive ranks, which keeps them aligned: static's, megatron_dcp's and flexsp's
// groups are then already in the pool.
std::vector<std::vector<int>> power_of_two_blocks(int ranks, int capacity);

}  // namespace minimllm
