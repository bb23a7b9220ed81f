// Internals shared by the communicator backends and CommPool (private to src/parallel): rank-set
// validation, the rank set -> MPI sub-communicator step (the NCCL backend bootstraps over it too), and
// argument checks common to every backend's collectives.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>
#include <vector>

namespace minimllm::detail {

// Throws std::invalid_argument unless `ranks` is non-empty, strictly increasing and within
// [0, world_size). `who` names the caller in the message.
void validate_rank_set(const char* who, const std::vector<int>& ranks, int world_size);

// Throws std::runtime_error naming `what` and MPI's error string when rc != MPI_SUCCESS.
void check_mpi(int rc, const char* what);

// An MPI communicator over `ranks` (world ranks), owned. Construction validates the set, requires this
// process among them (std::invalid_argument otherwise) and is collective over the members only
// (MPI_Comm_create_group; one rank: a duplicate of MPI_COMM_SELF, no communication).
class GroupComm {
 public:
  GroupComm(MPI_Comm world, const std::vector<int>& ranks);
  ~GroupComm();  // MPI_Comm_free, skipped once MPI is finalised
  GroupComm(const GroupComm&) = delete;
  GroupComm& operator=(const GroupComm&) = delete;

  MPI_Comm get() const { return comm_; }
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 0;
};

// Argument checks of Communicator::allgatherv / reduce_scatterv (std::invalid_argument): one count per
// group rank and, for allgatherv, send_count == recv_counts[rank]. Return sum(counts).
std::size_t check_allgatherv_args(std::size_t send_count, const std::vector<std::size_t>& recv_counts,
                                  int group_rank, int group_size);
std::size_t check_reduce_scatterv_args(const std::vector<std::size_t>& counts, int group_size);

// Argument checks of Communicator::alltoallv: four vectors of one entry per group rank, and this rank's
// send and receive counts to itself equal. Returns the floats each buffer spans: max(displ + count).
struct AlltoallvExtents {
  std::size_t send = 0, recv = 0;
  bool recv_has_gaps = false;  // the receive blocks do not tile [0, recv) exactly
};
AlltoallvExtents check_alltoallv_args(const std::vector<std::size_t>& send_counts,
                                      const std::vector<std::size_t>& send_displs,
                                      const std::vector<std::size_t>& recv_counts,
                                      const std::vector<std::size_t>& recv_displs, int group_rank,
                                      int group_size);

}  // namespace minimllm::detail
