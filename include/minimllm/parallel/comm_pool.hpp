// CommPool: communicators cached by sorted rank set, at most `capacity` held by each rank, least recently
// used evicted (the bookkeeping is layout/comm_ledger.hpp's CommLedger, which the simulator also plays).
//
// Safety without extra messages: every rank calls acquire() for EVERY group of a step (members and
// non-members alike), in the same canonical order (the plan is identical on every rank). The pool's
// bookkeeping is therefore identical on every rank, so all members of a group create it, hit it, and
// evict it at the same point; only members hold an actual communicator. Creation is collective over
// the members only and happens in that canonical order, which rules out deadlock when different ranks
// need different groups in the same step.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "minimllm/layout/comm_ledger.hpp"
#include "minimllm/parallel/communicator.hpp"

namespace minimllm {

struct CommPoolStats {
  std::int64_t hits = 0, misses = 0, creations = 0, evictions = 0;
  double creation_seconds = 0.0;  // wall time this rank spent creating communicators
  std::int64_t live = 0;          // communicators this rank holds now
};

class CommPool {
 public:
  using Factory = CommunicatorFactory;

  // capacity: most communicators a rank holds (>= 1; groups of one rank aside). factory:
  // create_mpi_communicator or create_nccl_communicator (choose_collectives picks one at start-up).
  // Collective over world: creates the world communicator (loss, boundary exchange) and the gradient
  // communicator once, outside the cache and its statistics.
  CommPool(MPI_Comm world, int capacity, Factory factory);
  ~CommPool();

  // Every rank calls this for every group, in the same order. Returns the group's communicator on its
  // members, nullptr elsewhere. `ranks` must be sorted and unique. Groups of one rank are not cached:
  // their members get a communicator over themselves (no creation cost, no pool slot).
  std::shared_ptr<Communicator> acquire(const std::vector<int>& ranks);

  // Creates `groups` (overlapping ones allowed) at start-up, before any step, in canonical order
  // (parallel.comm_precreate; layout/comm_ledger.hpp: power_of_two_blocks): the steps then hit them.
  // Every rank calls it with the same groups. The statistics count them; a step's are its difference.
  void precreate(std::vector<std::vector<int>> groups);

  // acquire() for each group of a step in canonical (sorted) order; returns this rank's group, if any.
  std::shared_ptr<Communicator> acquire_step(std::vector<std::vector<int>> groups);

  // Every rank of the world, in world order, with the pool's backend.
  const std::shared_ptr<Communicator>& world() const { return world_comm_; }
  // The world's ranks again, a communicator of its own for the gradient all-reduce: its nonblocking
  // all-reduces run during the backward pass, and MPI requires every rank to start a communicator's
  // collectives in the same order, which the boundary exchange on world() would not respect (a rank may
  // reach it before or after its first gradient bucket). On NCCL, its own stream.
  const std::shared_ptr<Communicator>& gradients() const { return gradients_comm_; }

  const CommPoolStats& stats() const { return stats_; }
  const Factory& factory() const { return factory_; }
  int capacity() const { return capacity_; }

 private:
  MPI_Comm world_;
  int world_rank_ = 0;
  int capacity_;
  Factory factory_;
  CommLedger ledger_;                                                  // identical on every rank
  std::map<std::vector<int>, std::shared_ptr<Communicator>> members_;  // this rank's live groups
  std::map<std::vector<int>, std::shared_ptr<Communicator>> singletons_;
  CommPoolStats stats_;
  std::shared_ptr<Communicator> world_comm_, gradients_comm_;
};

}  // namespace minimllm
