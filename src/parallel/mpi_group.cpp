// The rank set -> MPI sub-communicator step and the argument checks shared by the communicator backends
// and CommPool (mpi_group.hpp).
#include "mpi_group.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>

namespace minimllm {
namespace detail {

void validate_rank_set(const char* who, const std::vector<int>& ranks, int world_size) {
  if (ranks.empty()) {
    throw std::invalid_argument(
        fmt::format("{}: empty rank set; a group names at least one world rank", who));
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= world_size) {
      throw std::invalid_argument(fmt::format("{}: rank set {} names rank {}, outside the world [0, {})", who,
                                              ranks, ranks[i], world_size));
    }
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      throw std::invalid_argument(fmt::format(
          "{}: rank set {} is not sorted and unique; list each world rank once, in increasing order", who,
          ranks));
    }
  }
}

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw std::runtime_error(fmt::format("{} failed: {}", what, std::string(text, length)));
}

namespace {

// MPI_Comm_create_group tag from the rank set (FNV-1a folded into [0, 32767], the least MPI_TAG_UB an
// implementation may have), so concurrent creations of different groups never match each other.
int group_tag(const std::vector<int>& ranks) {
  std::uint32_t hash = 2166136261u;
  for (int rank : ranks) {
    hash = (hash ^ static_cast<std::uint32_t>(rank)) * 16777619u;
  }
  return static_cast<int>((hash ^ (hash >> 15)) & 0x7fffu);
}

}  // namespace

GroupComm::GroupComm(MPI_Comm world, const std::vector<int>& ranks) {
  int world_size = 0, world_rank = 0;
  check_mpi(MPI_Comm_size(world, &world_size), "MPI_Comm_size");
  check_mpi(MPI_Comm_rank(world, &world_rank), "MPI_Comm_rank");
  validate_rank_set("create communicator", ranks, world_size);
  if (!std::binary_search(ranks.begin(), ranks.end(), world_rank)) {
    throw std::invalid_argument(
        fmt::format("create communicator: world rank {} is not in the group {}; only its members create it",
                    world_rank, ranks));
  }
  if (ranks.size() == 1) {
    check_mpi(MPI_Comm_dup(MPI_COMM_SELF, &comm_), "MPI_Comm_dup(MPI_COMM_SELF)");
  } else {
    MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    check_mpi(MPI_Comm_group(world, &world_group), "MPI_Comm_group");
    const int rc_incl = MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &group);
    const int rc_create =
        rc_incl == MPI_SUCCESS ? MPI_Comm_create_group(world, group, group_tag(ranks), &comm_) : MPI_SUCCESS;
    MPI_Group_free(&world_group);
    if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
    check_mpi(rc_incl, "MPI_Group_incl");
    check_mpi(rc_create, "MPI_Comm_create_group");
  }
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

GroupComm::~GroupComm() {
  // A pooled communicator may outlive MPI (held in a static or by a late shared_ptr).
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

std::size_t check_allgatherv_args(std::size_t send_count, const std::vector<std::size_t>& recv_counts,
                                  int group_rank, int group_size) {
  if (recv_counts.size() != static_cast<std::size_t>(group_size)) {
    throw std::invalid_argument(fmt::format(
        "allgatherv: recv_counts has {} entries but the group has {} ranks; pass one count per group rank",
        recv_counts.size(), group_size));
  }
  if (send_count != recv_counts[group_rank]) {
    throw std::invalid_argument(fmt::format(
        "allgatherv: send_count {} differs from this rank's recv_counts[{}] = {}; they must be equal",
        send_count, group_rank, recv_counts[group_rank]));
  }
  return std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0});
}

std::size_t check_reduce_scatterv_args(const std::vector<std::size_t>& counts, int group_size) {
  if (counts.size() != static_cast<std::size_t>(group_size)) {
    throw std::invalid_argument(fmt::format(
        "reduce_scatterv: counts has {} entries but the group has {} ranks; pass one count per group rank",
        counts.size(), group_size));
  }
  return std::accumulate(counts.begin(), counts.end(), std::size_t{0});
}

AlltoallvExtents check_alltoallv_args(const std::vector<std::size_t>& send_counts,
                                      const std::vector<std::size_t>& send_displs,
                                      const std::vector<std::size_t>& recv_counts,
                                      const std::vector<std::size_t>& recv_displs, int group_rank,
                                      int group_size) {
  const auto size = static_cast<std::size_t>(group_size);
  for (const auto* v : {&send_counts, &send_displs, &recv_counts, &recv_displs}) {
    if (v->size() != size) {
      throw std::invalid_argument(
          fmt::format("alltoallv: a count or displacement list has {} entries but the group has {} ranks; "
                      "pass one per group rank",
                      v->size(), group_size));
    }
  }
  if (send_counts[group_rank] != recv_counts[group_rank]) {
    throw std::invalid_argument(
        fmt::format("alltoallv: this rank sends {} floats to itself but expects {}; they must be equal",
                    send_counts[group_rank], recv_counts[group_rank]));
  }
  AlltoallvExtents extents;
  std::size_t received = 0;
  for (std::size_t r = 0; r < size; ++r) {
    if (send_counts[r]) extents.send = std::max(extents.send, send_displs[r] + send_counts[r]);
    if (recv_counts[r]) extents.recv = std::max(extents.recv, recv_displs[r] + recv_counts[r]);
    received += recv_counts[r];
  }
  // Non-overlapping blocks (the caller's duty) tile [0, recv) exactly when their sizes add up to it.
  extents.recv_has_gaps = received != extents.recv;
  return extents;
}

}  // namespace detail

}  // namespace minimllm
