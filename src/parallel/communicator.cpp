// MPI backend of Communicator, and the rank-set -> MPI sub-communicator step shared with the NCCL backend
// and CommPool (mpi_group.hpp).
#include "minimllm/parallel/communicator.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <stdexcept>

#include "minimllm/core/types.hpp"
#include "mpi_group.hpp"

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

namespace {

using HostUnmanaged = Kokkos::View<float*, HostSpace, Kokkos::MemoryUnmanaged>;
using MemUnmanaged = Kokkos::View<float*, MemSpace, Kokkos::MemoryUnmanaged>;
template <class Space>
using ConstUnmanaged = Kokkos::View<const float*, Space, Kokkos::MemoryUnmanaged>;

// MPI counts and displacements are int; larger buffers would need chunking, which minimllm never needs.
int to_int(std::size_t count, const char* op) {
  if (count > static_cast<std::size_t>(INT_MAX)) {
    throw std::overflow_error(
        fmt::format("MPI communicator {}: {} floats exceed MPI's int count limit ({}); "
                    "split the buffer into smaller collectives",
                    op, count, INT_MAX));
  }
  return static_cast<int>(count);
}

// Host address of `count` floats of MemSpace data for MPI: the data itself when MemSpace is host
// accessible, else `stage` (holding a copy of the data when copy_in). No CUDA-aware MPI is assumed.
template <class T>
T* on_host(T* data, std::size_t count, std::vector<float>& stage, bool copy_in) {
  if (copy_in) Kokkos::fence();  // MPI must read the finished results of kernels still in flight
  if constexpr (kMemSpaceIsHostAccessible) {
    return data;
  } else {
    stage.resize(count);
    if (copy_in && count > 0) {
      transfer(HostUnmanaged(stage.data(), count), ConstUnmanaged<MemSpace>(data, count));
    }
    return stage.data();
  }
}

// Copies a staged result back into MemSpace; nothing to do when MPI wrote the data in place.
void to_mem_space(const float* host, float* data, std::size_t count) {
  if (host != data && count > 0) transfer(MemUnmanaged(data, count), ConstUnmanaged<HostSpace>(host, count));
}

// dst = src, count floats, both in MemSpace (a group of one: no MPI, no staging, not a transfer).
void copy_in_mem_space(float* dst, const float* src, std::size_t count) {
  if (dst == src || count == 0) return;
  Kokkos::deep_copy(MemUnmanaged(dst, count), ConstUnmanaged<MemSpace>(src, count));
  Kokkos::fence();
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm world, const std::vector<int>& ranks)
      : Communicator(ranks), group_(world, ranks) {}

  const char* backend() const override { return "mpi"; }
  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }

  // A group of one has nothing to talk about: its collectives are copies in MemSpace (or nothing), so
  // they never stage device data through the host.
  void allreduce_sum(float* data, std::size_t count) override {
    if (size() == 1) return Kokkos::fence();
    float* buffer = on_host(data, count, send_stage_, true);
    detail::check_mpi(
        MPI_Allreduce(MPI_IN_PLACE, buffer, to_int(count, "allreduce_sum"), MPI_FLOAT, MPI_SUM, group_.get()),
        "MPI_Allreduce");
    to_mem_space(buffer, data, count);
  }

  void allgatherv(const float* send, std::size_t send_count, float* recv,
                  const std::vector<std::size_t>& recv_counts) override {
    const std::size_t total = detail::check_allgatherv_args(send_count, recv_counts, rank(), size());
    if (size() == 1) return copy_in_mem_space(recv, send, send_count);
    to_int(total, "allgatherv");  // every displacement then fits too
    set_counts(recv_counts);
    const float* send_host = on_host(send, send_count, send_stage_, true);
    float* recv_host = on_host(recv, total, recv_stage_, false);
    detail::check_mpi(MPI_Allgatherv(send_host, counts_[rank()], MPI_FLOAT, recv_host, counts_.data(),
                                     displs_.data(), MPI_FLOAT, group_.get()),
                      "MPI_Allgatherv");
    to_mem_space(recv_host, recv, total);
  }

  void reduce_scatterv(const float* send, float* recv, const std::vector<std::size_t>& counts) override {
    const std::size_t total = detail::check_reduce_scatterv_args(counts, size());
    if (size() == 1) return copy_in_mem_space(recv, send, total);
    to_int(total, "reduce_scatterv");
    set_counts(counts);
    const std::size_t mine = counts[rank()];
    const float* send_host = on_host(send, total, send_stage_, true);
    float* recv_host = on_host(recv, mine, recv_stage_, false);
    detail::check_mpi(
        MPI_Reduce_scatter(send_host, recv_host, counts_.data(), MPI_FLOAT, MPI_SUM, group_.get()),
        "MPI_Reduce_scatter");
    to_mem_space(recv_host, recv, mine);
  }

  void alltoallv(const float* send, const std::vector<std::size_t>& send_counts,
                 const std::vector<std::size_t>& send_displs, float* recv,
                 const std::vector<std::size_t>& recv_counts,
                 const std::vector<std::size_t>& recv_displs) override {
    const detail::AlltoallvExtents extents =
        detail::check_alltoallv_args(send_counts, send_displs, recv_counts, recv_displs, rank(), size());
    if (size() == 1) return copy_in_mem_space(recv + recv_displs[0], send + send_displs[0], send_counts[0]);
    to_int(extents.send, "alltoallv"), to_int(extents.recv, "alltoallv");  // displacements fit too
    to_ints(send_counts, send_displs, counts_, displs_);
    to_ints(recv_counts, recv_displs, recv_counts_, recv_displs_);
    const float* send_host = on_host(send, extents.send, send_stage_, true);
    // Staged receive blocks go back as one copy: with gaps between them, the gaps must hold recv's own
    // values, so they are staged too.
    float* recv_host = on_host(recv, extents.recv, recv_stage_, extents.recv_has_gaps);
    detail::check_mpi(MPI_Alltoallv(send_host, counts_.data(), displs_.data(), MPI_FLOAT, recv_host,
                                    recv_counts_.data(), recv_displs_.data(), MPI_FLOAT, group_.get()),
                      "MPI_Alltoallv");
    to_mem_space(recv_host, recv, extents.recv);
  }

 private:
  static void to_ints(const std::vector<std::size_t>& counts, const std::vector<std::size_t>& displs,
                      std::vector<int>& int_counts, std::vector<int>& int_displs) {
    int_counts.assign(counts.begin(), counts.end());
    int_displs.assign(displs.begin(), displs.end());
  }

  // int counts and displacements for MPI (the caller has checked that the total fits an int).
  void set_counts(const std::vector<std::size_t>& counts) {
    counts_.resize(counts.size());
    displs_.resize(counts.size());
    int offset = 0;
    for (std::size_t r = 0; r < counts.size(); ++r) {
      counts_[r] = static_cast<int>(counts[r]);
      displs_[r] = offset;
      offset += counts_[r];
    }
  }

  detail::GroupComm group_;
  std::vector<int> counts_, displs_, recv_counts_, recv_displs_;
  std::vector<float> send_stage_, recv_stage_;  // host staging, used only when MemSpace is device memory
};

}  // namespace

std::unique_ptr<Communicator> create_mpi_communicator(MPI_Comm world, const std::vector<int>& ranks) {
  return std::make_unique<MpiCommunicator>(world, ranks);
}

CollectivesChoice choose_collectives(MPI_Comm world, const std::string& requested) {
  if (requested != "auto" && requested != "mpi" && requested != "nccl") {
    throw std::invalid_argument(
        fmt::format("collectives backend '{}' is unknown; valid: auto, mpi, nccl", requested));
  }
  const char* mpi_reason =
      kMemSpaceIsHostAccessible ? "host memory, in place" : "device buffers staged through host memory";
  if (requested == "mpi") return {"mpi", fmt::format("requested; {}", mpi_reason), create_mpi_communicator};
  std::string why;
  if (nccl_device_path_available(world, why)) {
    return {"nccl", "device memory on NCCL's stream, no host staging", create_nccl_communicator};
  }
  if (requested == "nccl") {
    throw std::runtime_error(fmt::format("runtime.collectives is nccl, but NCCL cannot run here: {}", why));
  }
  return {"mpi", fmt::format("{} ({})", mpi_reason, why), create_mpi_communicator};
}

}  // namespace minimllm
