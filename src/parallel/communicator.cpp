// What every Communicator backend shares: point-to-point messages and host values, over the group's MPI
// communicator (host_comm()), with device buffers staged through host memory (host_staging.hpp).
#include "minimllm/parallel/communicator.hpp"

#include <fmt/format.h>

#include <limits>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "host_staging.hpp"
#include "mpi_group.hpp"

namespace minimllm {
namespace {

// The MPI requests of one isend or irecv, and the host copy of its buffer when MemSpace is device memory
// (owned here: it must stay until MPI is done with it, however long the caller keeps the request open).
class MpiRequest final : public CommRequest {
 public:
  MpiRequest(float* mem_space, std::size_t span, bool receive)
      : mem_space_(mem_space), span_(span), receive_(receive) {}

  ~MpiRequest() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Request& request : requests_) {
      if (request == MPI_REQUEST_NULL) continue;
      if (receive_) MPI_Cancel(&request);
      MPI_Request_free(&request);
    }
  }

  void wait() override {
    if (done_) return;
    done_ = true;
    detail::check_mpi(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
                      "MPI_Waitall");
    if (receive_) detail::to_mem_space(host_, mem_space_, span_);
  }

  float* mem_space_;
  std::size_t span_;
  bool receive_;
  bool done_ = false;
  float* host_ = nullptr;     // what MPI reads or writes: mem_space_ itself, or stage_
  std::vector<float> stage_;  // host staging, only when MemSpace is device memory
  std::vector<MPI_Request> requests_;
};

void check_blocks(const char* what, std::size_t span, const std::vector<MessageBlock>& blocks, int size) {
  for (const MessageBlock& b : blocks) {
    if (b.peer < 0 || b.peer >= size)
      throw std::invalid_argument(
          fmt::format("{}: peer {} is outside the group's ranks [0, {})", what, b.peer, size));
    if (b.offset + b.count > span)
      throw std::invalid_argument(
          fmt::format("{}: block [{}, {}) to or from rank {} is outside the {} floats given", what, b.offset,
                      b.offset + b.count, b.peer, span));
  }
}

// Checks the blocks, stages a device buffer through the host (a send's data now, a receive's on wait())
// and posts one MPI_Isend or MPI_Irecv per block.
std::unique_ptr<CommRequest> post_messages(bool receive, float* data, std::size_t span,
                                           const std::vector<MessageBlock>& blocks, int tag, MPI_Comm comm,
                                           int size) {
  const char* what = receive ? "irecv" : "isend";
  check_blocks(what, span, blocks, size);
  detail::to_int(span, what);
  auto request = std::make_unique<MpiRequest>(data, span, receive);
  request->host_ = detail::on_host(data, span, request->stage_, !receive);
  request->requests_.assign(blocks.size(), MPI_REQUEST_NULL);
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    float* at = request->host_ + blocks[i].offset;
    const int count = static_cast<int>(blocks[i].count), peer = blocks[i].peer;
    MPI_Request* handle = &request->requests_[i];
    detail::check_mpi(receive ? MPI_Irecv(at, count, MPI_FLOAT, peer, tag, comm, handle)
                              : MPI_Isend(at, count, MPI_FLOAT, peer, tag, comm, handle),
                      receive ? "MPI_Irecv" : "MPI_Isend");
  }
  return request;
}

}  // namespace

std::unique_ptr<CommRequest> Communicator::isend(const float* send, std::size_t span,
                                                 const std::vector<MessageBlock>& blocks, int tag) {
  // MPI never writes a send buffer.
  return post_messages(false, const_cast<float*>(send), span, blocks, tag, host_comm(), size());
}

std::unique_ptr<CommRequest> Communicator::irecv(float* recv, std::size_t span,
                                                 const std::vector<MessageBlock>& blocks, int tag) {
  return post_messages(true, recv, span, blocks, tag, host_comm(), size());
}

std::unique_ptr<CommRequest> Communicator::isend(const float* send, std::size_t count, int peer, int tag) {
  return isend(send, count, std::vector<MessageBlock>{{peer, 0, count}}, tag);
}

std::unique_ptr<CommRequest> Communicator::irecv(float* recv, std::size_t count, int peer, int tag) {
  return irecv(recv, count, std::vector<MessageBlock>{{peer, 0, count}}, tag);
}

int Communicator::max_tag() const {
  int* tag_ub = nullptr;
  int has_tag_ub = 0;
  MPI_Comm_get_attr(host_comm(), MPI_TAG_UB, &tag_ub, &has_tag_ub);
  return has_tag_ub ? *tag_ub : 32767;  // 32767: the least upper bound MPI allows
}

double Communicator::allreduce_sum(double value) {
  double sum = 0.0;
  detail::check_mpi(MPI_Allreduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, host_comm()), "MPI_Allreduce");
  return sum;
}

void Communicator::allreduce_max(std::vector<double>& values) {
  detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE,
                                  MPI_MAX, host_comm()),
                    "MPI_Allreduce");
}

int Communicator::allreduce_min(int value) {
  int least = 0;
  detail::check_mpi(MPI_Allreduce(&value, &least, 1, MPI_INT, MPI_MIN, host_comm()), "MPI_Allreduce");
  return least;
}

std::int64_t Communicator::allreduce_min(std::int64_t value) {
  std::int64_t least = 0;
  detail::check_mpi(MPI_Allreduce(&value, &least, 1, MPI_INT64_T, MPI_MIN, host_comm()), "MPI_Allreduce");
  return least;
}

std::vector<int> Communicator::alltoall(const std::vector<int>& send, int count) {
  if (count < 0 || send.size() != static_cast<std::size_t>(count) * static_cast<std::size_t>(size()))
    throw std::invalid_argument(fmt::format(
        "alltoall: {} ints sent, but the group has {} ranks of {} ints each", send.size(), size(), count));
  std::vector<int> recv(send.size());
  detail::check_mpi(MPI_Alltoall(send.data(), count, MPI_INT, recv.data(), count, MPI_INT, host_comm()),
                    "MPI_Alltoall");
  return recv;
}

std::vector<unsigned char> Communicator::alltoallv_bytes(const std::vector<unsigned char>& send,
                                                         const std::vector<std::size_t>& send_counts,
                                                         const std::vector<std::size_t>& recv_counts) {
  const auto n = static_cast<std::size_t>(size());
  if (send_counts.size() != n || recv_counts.size() != n)
    throw std::invalid_argument(fmt::format("alltoallv_bytes: {} send and {} receive counts for {} ranks",
                                            send_counts.size(), recv_counts.size(), n));
  // MPI counts and displacements are ints: blocks and totals beyond that would wrap.
  const auto layout = [&](const std::vector<std::size_t>& counts, const char* what) {
    std::vector<int> count(n), displ(n);
    std::size_t offset = 0;
    for (std::size_t r = 0; r < n; ++r) {
      if (offset + counts[r] > static_cast<std::size_t>(std::numeric_limits<int>::max()))
        throw std::runtime_error(fmt::format(
            "alltoallv_bytes: {} {} bytes on this rank exceed MPI's int counts ({}); use fewer or smaller "
            "samples per step",
            what, offset + counts[r], std::numeric_limits<int>::max()));
      count[r] = static_cast<int>(counts[r]), displ[r] = static_cast<int>(offset);
      offset += counts[r];
    }
    return std::make_tuple(count, displ, offset);
  };
  const auto [send_count, send_displ, send_total] = layout(send_counts, "sending");
  const auto [recv_count, recv_displ, recv_total] = layout(recv_counts, "receiving");
  if (send_total != send.size())
    throw std::invalid_argument(
        fmt::format("alltoallv_bytes: counts sum to {} bytes, the buffer holds {}", send_total, send.size()));
  std::vector<unsigned char> recv(recv_total);
  detail::check_mpi(MPI_Alltoallv(send.data(), send_count.data(), send_displ.data(), MPI_BYTE, recv.data(),
                                  recv_count.data(), recv_displ.data(), MPI_BYTE, host_comm()),
                    "MPI_Alltoallv");
  return recv;
}

}  // namespace minimllm
