// MPI backend of Communicator: host memory in place, device buffers staged through host copies.
#include <mpi.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "host_staging.hpp"
#include "minimllm/core/clock.hpp"
#include "minimllm/core/types.hpp"
#include "minimllm/parallel/communicator.hpp"
#include "mpi_group.hpp"

namespace minimllm {
namespace {

// dst = src, count floats, both in MemSpace (a group of one: no MPI, no staging, not a transfer).
void copy_in_mem_space(float* dst, const float* src, std::size_t count) {
  if (dst == src || count == 0) return;
  Kokkos::deep_copy(detail::MemUnmanaged(dst, count), detail::ConstUnmanaged<MemSpace>(src, count));
  step_fence();
}

// Host staging of requests destroyed before completing (an error path): MPI may still write into it
// until the process ends, so it is never freed before then.
std::vector<std::vector<float>>& abandoned_staging() {
  static std::vector<std::vector<float>> kept;
  return kept;
}

// One MPI_Iallreduce in flight, and its host staging when MemSpace is device memory (owned here: MPI
// reads and writes it until the request completes).
class MpiAllreduceRequest final : public CommRequest {
 public:
  MpiAllreduceRequest(float* data, std::size_t count, MPI_Comm comm) : data_(data), count_(count) {
    host_ = detail::on_host(data, count, stage_, true);
    detail::check_mpi(MPI_Iallreduce(MPI_IN_PLACE, host_, detail::to_int(count, "iallreduce_sum"), MPI_FLOAT,
                                     MPI_SUM, comm, &request_),
                      "MPI_Iallreduce");
  }

  // One never waited for (an error path) is left to MPI: freeing an active collective's request is
  // erroneous, and the run is ending. Its staging outlives it (abandoned_staging).
  ~MpiAllreduceRequest() override {
    if (!done_ && !stage_.empty()) abandoned_staging().push_back(std::move(stage_));
  }

  void wait() override {
    if (done_) return;
    done_ = true;
    detail::check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");
    detail::to_mem_space(host_, data_, count_);
  }

  void progress() override {
    if (done_ || request_ == MPI_REQUEST_NULL) return;
    int flag = 0;
    detail::check_mpi(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE), "MPI_Test");
  }

 private:
  float* data_;
  std::size_t count_;
  bool done_ = false;
  float* host_ = nullptr;
  std::vector<float> stage_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// A request that completed when it was made (a group of one).
class DoneRequest final : public CommRequest {
 public:
  void wait() override {}
};

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
    if (size() == 1) return step_fence();
    float* buffer = detail::on_host(data, count, send_stage_, true);
    detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, buffer, detail::to_int(count, "allreduce_sum"), MPI_FLOAT,
                                    MPI_SUM, group_.get()),
                      "MPI_Allreduce");
    detail::to_mem_space(buffer, data, count);
  }

  std::unique_ptr<CommRequest> iallreduce_sum(float* data, std::size_t count) override {
    if (size() == 1 || count == 0) {
      step_fence();
      return std::make_unique<DoneRequest>();
    }
    return std::make_unique<MpiAllreduceRequest>(data, count, group_.get());
  }

  void allgatherv(const float* send, std::size_t send_count, float* recv,
                  const std::vector<std::size_t>& recv_counts) override {
    const std::size_t total = detail::check_allgatherv_args(send_count, recv_counts, rank(), size());
    if (size() == 1) return copy_in_mem_space(recv, send, send_count);
    detail::to_int(total, "allgatherv");  // every displacement then fits too
    set_counts(recv_counts);
    const float* send_host = detail::on_host(send, send_count, send_stage_, true);
    float* recv_host = detail::on_host(recv, total, recv_stage_, false);
    detail::check_mpi(MPI_Allgatherv(send_host, counts_[rank()], MPI_FLOAT, recv_host, counts_.data(),
                                     displs_.data(), MPI_FLOAT, group_.get()),
                      "MPI_Allgatherv");
    detail::to_mem_space(recv_host, recv, total);
  }

  void reduce_scatterv(const float* send, float* recv, const std::vector<std::size_t>& counts) override {
    const std::size_t total = detail::check_reduce_scatterv_args(counts, size());
    if (size() == 1) return copy_in_mem_space(recv, send, total);
    detail::to_int(total, "reduce_scatterv");
    set_counts(counts);
    const std::size_t mine = counts[rank()];
    const float* send_host = detail::on_host(send, total, send_stage_, true);
    float* recv_host = detail::on_host(recv, mine, recv_stage_, false);
    detail::check_mpi(
        MPI_Reduce_scatter(send_host, recv_host, counts_.data(), MPI_FLOAT, MPI_SUM, group_.get()),
        "MPI_Reduce_scatter");
    detail::to_mem_space(recv_host, recv, mine);
  }

  void alltoallv(const float* send, const std::vector<std::size_t>& send_counts,
                 const std::vector<std::size_t>& send_displs, float* recv,
                 const std::vector<std::size_t>& recv_counts,
                 const std::vector<std::size_t>& recv_displs) override {
    const detail::AlltoallvExtents extents =
        detail::check_alltoallv_args(send_counts, send_displs, recv_counts, recv_displs, rank(), size());
    if (size() == 1) return copy_in_mem_space(recv + recv_displs[0], send + send_displs[0], send_counts[0]);
    detail::to_int(extents.send, "alltoallv"),
        detail::to_int(extents.recv, "alltoallv");  // displacements fit too
    to_ints(send_counts, send_displs, counts_, displs_);
    to_ints(recv_counts, recv_displs, recv_counts_, recv_displs_);
    const float* send_host = detail::on_host(send, extents.send, send_stage_, true);
    // Staged receive blocks go back as one copy: with gaps between them, the gaps must hold recv's own
    // values, so they are staged too.
    float* recv_host = detail::on_host(recv, extents.recv, recv_stage_, extents.recv_has_gaps);
    detail::check_mpi(MPI_Alltoallv(send_host, counts_.data(), displs_.data(), MPI_FLOAT, recv_host,
                                    recv_counts_.data(), recv_displs_.data(), MPI_FLOAT, group_.get()),
                      "MPI_Alltoallv");
    detail::to_mem_space(recv_host, recv, extents.recv);
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

  MPI_Comm host_comm() const override { return group_.get(); }

  detail::GroupComm group_;
  std::vector<int> counts_, displs_, recv_counts_, recv_displs_;
  // Host staging, used only when MemSpace is device memory. Owned by the communicator, not taken from the
  // step's Workspace: that is device memory and holds only what a scope covers, while these are host
  // buffers reused by every collective of a communicator that lives for many steps (CommPool).
  std::vector<float> send_stage_, recv_stage_;
};

}  // namespace

std::unique_ptr<Communicator> create_mpi_communicator(MPI_Comm world, const std::vector<int>& ranks) {
  return std::make_unique<MpiCommunicator>(world, ranks);
}

}  // namespace minimllm
