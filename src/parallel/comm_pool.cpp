// CommPool: see the header for the protocol. hits, misses, creations and evictions count pool events
// and are therefore identical on every rank; creation_seconds and live are this rank's (members only).
// Singleton groups are outside all of them: each rank keeps one communicator over itself, created on
// first use, never evicted.
#include "minimllm/parallel/comm_pool.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "minimllm/core/world.hpp"
#include "mpi_group.hpp"

namespace minimllm {

CommPool::CommPool(MPI_Comm world, int capacity, Factory factory)
    : world_(world), capacity_(capacity), factory_(std::move(factory)), ledger_(std::max(capacity, 1)) {
  if (capacity < 1) {
    throw std::invalid_argument(
        fmt::format("CommPool: capacity {} is invalid; it must be at least 1", capacity));
  }
  if (!factory_) {
    throw std::invalid_argument(
        "CommPool: empty factory; pass create_mpi_communicator or create_nccl_communicator");
  }
  detail::check_mpi(MPI_Comm_rank(world_, &world_rank_), "MPI_Comm_rank");
  int world_size = 0;
  detail::check_mpi(MPI_Comm_size(world_, &world_size), "MPI_Comm_size");
  world_comm_ = factory_(world_, consecutive_ranks(0, world_size));
  gradients_comm_ = factory_(world_, consecutive_ranks(0, world_size));
}

CommPool::~CommPool() = default;

std::shared_ptr<Communicator> CommPool::acquire(const std::vector<int>& ranks) {
  int world_size = 0;
  MPI_Comm_size(world_, &world_size);
  detail::validate_rank_set("CommPool::acquire", ranks, world_size);
  const bool member = std::binary_search(ranks.begin(), ranks.end(), world_rank_);

  if (ranks.size() == 1) {
    if (!member) return nullptr;
    // Local to this rank (no communication), so ranks need not agree on when it is created.
    std::shared_ptr<Communicator>& self = singletons_[ranks];
    if (!self) self = factory_(world_, ranks);
    return self;
  }

  // Every rank plays the same ledger: the members of an evicted group all drop it here, and all members
  // of a group to create create it here.
  const CommLedger::Use use = ledger_.use(ranks);
  if (use.hit) {
    ++stats_.hits;
    return member ? members_.at(ranks) : nullptr;
  }
  ++stats_.misses;
  for (const std::vector<int>& evicted : use.evicted) {
    members_.erase(evicted);  // a caller still holding the shared_ptr keeps it valid until released
    ++stats_.evictions;
  }
  ++stats_.creations;
  std::shared_ptr<Communicator> comm;
  if (member) {
    const auto start = std::chrono::steady_clock::now();
    comm = factory_(world_, ranks);  // collective over the members only
    stats_.creation_seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    members_[ranks] = comm;
  }
  stats_.live = static_cast<std::int64_t>(members_.size());
  return comm;
}

void CommPool::precreate(std::vector<std::vector<int>> groups) {
  // Sorted: any two groups are created in the same order on their common members, so that no member waits
  // in one creation while another waits in the other.
  std::sort(groups.begin(), groups.end());
  for (const std::vector<int>& group : groups) acquire(group);
}

std::shared_ptr<Communicator> CommPool::acquire_step(std::vector<std::vector<int>> groups) {
  std::sort(groups.begin(), groups.end());
  // Check the whole step before touching the pool, so an invalid step throws on every rank and leaves
  // the bookkeeping unchanged. Groups must be disjoint: "this rank's group" must be unique.
  int world_size = 0;
  MPI_Comm_size(world_, &world_size);
  std::vector<int> all_ranks;
  for (const auto& group : groups) {
    detail::validate_rank_set("CommPool::acquire_step", group, world_size);
    all_ranks.insert(all_ranks.end(), group.begin(), group.end());
  }
  std::sort(all_ranks.begin(), all_ranks.end());
  if (auto twice = std::adjacent_find(all_ranks.begin(), all_ranks.end()); twice != all_ranks.end()) {
    throw std::invalid_argument(
        fmt::format("CommPool::acquire_step: rank {} is in more than one group of the step {}; a step's "
                    "groups must be disjoint",
                    *twice, groups));
  }

  std::shared_ptr<Communicator> mine;
  for (const auto& group : groups) {
    if (auto comm = acquire(group)) mine = std::move(comm);
  }
  return mine;
}

}  // namespace minimllm
