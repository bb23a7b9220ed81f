// One group of ranks and the communication minimllm needs, behind one interface with two backends:
// MPI (host memory; device buffers are staged through host copies, counted as transfers) and NCCL
// (device memory, its own CUDA stream; compiled only with MINIMLLM_ENABLE_NCCL). Buffers are float
// arrays in MemSpace. Every collective is synchronous: it fences Kokkos before reading and has finished
// writing when it returns. Point-to-point messages and host values go through MPI on both backends
// (the NCCL one keeps an MPI communicator over its group for them; see isend).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace minimllm {

// A point-to-point operation in flight (Communicator::isend / irecv). wait() completes it: a receive's
// rows are then in its buffer, a send's buffer may be written again. A second wait() does nothing.
// Destroying one not waited for abandons its messages (for error paths only: the peers' matching
// operations never complete).
class CommRequest {
 public:
  virtual ~CommRequest() = default;
  virtual void wait() = 0;
  // Lets the library advance the operation without blocking (MPI progresses nonblocking collectives only
  // inside MPI calls; with one core per rank there is no progress thread). Does nothing once done.
  virtual void progress() {}
};

// One message of a batched isend / irecv: `count` floats at buffer + offset, to or from group rank `peer`.
struct MessageBlock {
  int peer = 0;
  std::size_t offset = 0, count = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual const char* backend() const = 0;  // "mpi" or "nccl"
  virtual int rank() const = 0;             // this process's rank within the group
  virtual int size() const = 0;
  const std::vector<int>& world_ranks() const { return world_ranks_; }  // sorted members

  // data[i] = sum over the group of data[i], in place.
  virtual void allreduce_sum(float* data, std::size_t count) = 0;
  // The same sum, nonblocking: fences Kokkos, starts the reduction and returns; `data` holds the sum after
  // the request's wait() and must not be touched before. Every member starts its nonblocking
  // all-reduces of a communicator in the same order (MPI's rule for collectives); a communicator used
  // for them should carry nothing else while they are in flight. MPI: MPI_Iallreduce (device buffers
  // staged through host memory, counted); NCCL: ncclAllReduce on the communicator's own stream.
  virtual std::unique_ptr<CommRequest> iallreduce_sum(float* data, std::size_t count) = 0;
  // recv = concatenation over group ranks r of their send buffers, recv_counts[r] floats each
  // (send_count must equal recv_counts[rank()]).
  virtual void allgatherv(const float* send, std::size_t send_count, float* recv,
                          const std::vector<std::size_t>& recv_counts) = 0;
  // Inverse of allgatherv's layout with a sum: send holds sum(counts) floats laid out as counts[r]
  // blocks; recv (counts[rank()] floats) = sum over the group of everyone's block rank().
  virtual void reduce_scatterv(const float* send, float* recv, const std::vector<std::size_t>& counts) = 0;
  // Personalised exchange: send_counts[r] floats at send + send_displs[r] go to group rank r, which
  // stores them at recv + recv_displs[rank()]; recv_counts[r] must equal what rank r sends here. Counts
  // and displacements are in floats, one per group rank; recv floats outside the blocks are untouched.
  virtual void alltoallv(const float* send, const std::vector<std::size_t>& send_counts,
                         const std::vector<std::size_t>& send_displs, float* recv,
                         const std::vector<std::size_t>& recv_counts,
                         const std::vector<std::size_t>& recv_displs) = 0;

  // Nonblocking point-to-point, one message per block: isend sends each block of `send` to its peer,
  // irecv receives each block of `recv` from its peer; `span` floats from the pointer (MemSpace) cover
  // every block. Messages of one (source, destination, tag) match in the order they were posted. isend
  // fences Kokkos before it reads. Both backends send over MPI on the group's MPI communicator; device
  // buffers are staged through host memory, one counted copy of the whole span per call (at isend, and
  // at a receive's wait()). The NCCL backend does not use ncclSend/ncclRecv here: those run in issue
  // order on one stream, so a receive posted early (as the disaggregated pipeline does) would hold back
  // this rank's later sends, and two ranks waiting on each other's sends would deadlock.
  std::unique_ptr<CommRequest> isend(const float* send, std::size_t span,
                                     const std::vector<MessageBlock>& blocks, int tag);
  std::unique_ptr<CommRequest> irecv(float* recv, std::size_t span, const std::vector<MessageBlock>& blocks,
                                     int tag);
  // One message of `count` floats.
  std::unique_ptr<CommRequest> isend(const float* send, std::size_t count, int peer, int tag);
  std::unique_ptr<CommRequest> irecv(float* recv, std::size_t count, int peer, int tag);
  int max_tag() const;  // the largest tag isend and irecv accept (MPI_TAG_UB, at least 32767)

  // Host values, synchronous over the group (MPI on both backends; no device memory involved).
  double allreduce_sum(double value);               // the sum over the group of everyone's value
  void allreduce_max(std::vector<double>& values);  // each the largest over the group, in place
  int allreduce_min(int value);                     // the least value over the group
  std::int64_t allreduce_min(std::int64_t value);
  // send: `count` ints per group rank, in rank order, block r for rank r. Returns, in the same layout,
  // the block each rank sent to this one.
  std::vector<int> alltoall(const std::vector<int>& send, int count);
  // Host bytes, personalised: send holds send_counts[r] bytes for each group rank r, back to back in rank
  // order; returns recv_counts[r] bytes from each rank r, back to back in rank order (recv_counts[r] must
  // equal what rank r sends here). Throws std::runtime_error naming the count when a block or a total
  // exceeds what MPI's int counts address.
  std::vector<unsigned char> alltoallv_bytes(const std::vector<unsigned char>& send,
                                             const std::vector<std::size_t>& send_counts,
                                             const std::vector<std::size_t>& recv_counts);

 protected:
  explicit Communicator(std::vector<int> world_ranks) : world_ranks_(std::move(world_ranks)) {}

  // The MPI communicator over the group (MPI rank = group rank) that carries point-to-point messages and
  // host values, whatever the backend of the collectives.
  virtual MPI_Comm host_comm() const = 0;

 private:
  std::vector<int> world_ranks_;
};

// Collective over the members of `ranks` only (sorted world ranks, this process among them); uses
// MPI_Comm_create_group, so ranks outside the group need not take part.
std::unique_ptr<Communicator> create_mpi_communicator(MPI_Comm world, const std::vector<int>& ranks);

// Same contract with NCCL (ncclCommInitRank, unique id sent over an MPI sub-communicator). Throws
// std::runtime_error when built without MINIMLLM_ENABLE_NCCL or when no GPU is usable.
std::unique_ptr<Communicator> create_nccl_communicator(MPI_Comm world, const std::vector<int>& ranks);

bool nccl_compiled();  // built with MINIMLLM_ENABLE_NCCL
// "2.28.9" from the libnccl.so.2 loaded at run time, or why there is none ("not loaded: ...").
std::string nccl_library_version();

using CommunicatorFactory =
    std::function<std::unique_ptr<Communicator>(MPI_Comm world, const std::vector<int>& ranks)>;

// The collective backend of a run, chosen once at start-up (runtime.collectives).
struct CollectivesChoice {
  std::string backend;  // "mpi" or "nccl"
  std::string reason;   // why, in a few words (banner)
  CommunicatorFactory factory;
};

// Collective over world. requested: "auto", "mpi" or "nccl". auto is NCCL on device memory when the
// build has NCCL, the Kokkos execution space is CUDA and every rank of a node has a GPU of its own
// (NCCL rejects two ranks of one communicator on one GPU); MPI otherwise (host memory in place, or
// device memory staged through the host). "nccl" where that does not hold throws std::runtime_error
// with the reason, on every rank. Any other value throws std::invalid_argument.
CollectivesChoice choose_collectives(MPI_Comm world, const std::string& requested);

// Whether NCCL can run this run's collectives on device memory (collective over world, the same answer
// on every rank); when not, `why` says what is missing.
bool nccl_device_path_available(MPI_Comm world, std::string& why);

}  // namespace minimllm
