// NCCL backend of Communicator (compiled with MINIMLLM_ENABLE_NCCL; otherwise create_nccl_communicator
// throws). The unique id travels over an MPI sub-communicator of the members, which the communicator keeps
// for its point-to-point messages and host values (Communicator::isend says why those are not NCCL's).
// libnccl.so.2 is opened at run time (dlopen), not linked: a program built with NCCL still starts where
// the library is missing, and runs its collectives over MPI, saying why.
#include <stdexcept>

#include "minimllm/core/clock.hpp"
#include "minimllm/parallel/communicator.hpp"

#ifdef MINIMLLM_ENABLE_NCCL
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nccl.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "minimllm/core/device.hpp"
#include "minimllm/core/types.hpp"
#include "mpi_group.hpp"
#endif

namespace minimllm {

#ifdef MINIMLLM_ENABLE_NCCL

#if !defined(KOKKOS_ENABLE_CUDA)
static_assert(kMemSpaceIsHostAccessible,
              "the NCCL backend needs CUDA device memory or a host Kokkos backend");
#endif

namespace {

// The NCCL entry points minimllm uses, resolved once from libnccl.so.2 (the soname any NCCL 2.x
// provides: the CUDA toolkit's, or Python's nvidia-nccl package, found through LD_LIBRARY_PATH).
struct NcclApi {
  std::string error;  // why the library is unusable; empty when every entry point resolved
  decltype(&::ncclGetErrorString) get_error_string = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclCommAbort) comm_abort = nullptr;
  decltype(&::ncclCommGetAsyncError) get_async_error = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclAllGather) all_gather = nullptr;
  decltype(&::ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&::ncclSend) send = nullptr;
  decltype(&::ncclRecv) recv = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclGetVersion) get_version = nullptr;
};

const NcclApi& nccl() {
  static const NcclApi api = [] {
    NcclApi a;
    void* library = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);  // never closed: used until exit
    if (!library) {
      const char* why = dlerror();
      a.error = fmt::format("libnccl.so.2 could not be loaded ({})", why ? why : "unknown reason");
      return a;
    }
    const auto resolve = [&](auto& entry, const char* name) {
      entry = reinterpret_cast<std::remove_reference_t<decltype(entry)>>(dlsym(library, name));
      if (!entry && a.error.empty()) a.error = fmt::format("libnccl.so.2 has no {}", name);
    };
    resolve(a.get_error_string, "ncclGetErrorString");
    resolve(a.get_unique_id, "ncclGetUniqueId");
    resolve(a.comm_init_rank, "ncclCommInitRank");
    resolve(a.comm_destroy, "ncclCommDestroy");
    resolve(a.comm_abort, "ncclCommAbort");
    resolve(a.get_async_error, "ncclCommGetAsyncError");
    resolve(a.all_reduce, "ncclAllReduce");
    resolve(a.all_gather, "ncclAllGather");
    resolve(a.reduce_scatter, "ncclReduceScatter");
    resolve(a.send, "ncclSend");
    resolve(a.recv, "ncclRecv");
    resolve(a.group_start, "ncclGroupStart");
    resolve(a.group_end, "ncclGroupEnd");
    resolve(a.get_version, "ncclGetVersion");
    return a;
  }();
  return api;
}

void check_cuda(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw std::runtime_error(fmt::format("{} failed: {}", what, cudaGetErrorString(rc)));
}

void check_nccl(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess)
    throw std::runtime_error(fmt::format("{} failed: {}", what, nccl().get_error_string(rc)));
}

// NCCL rejects two ranks of one communicator on the same GPU. Kokkos's CUDA backend has already mapped
// this process to a device; host backends have not, so pick one per node-local rank from the launcher's
// environment, as Kokkos does.
void select_device() {
#if !defined(KOKKOS_ENABLE_CUDA)
  static const int device = [] {
    int count = 0;
    check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (count == 0) throw std::runtime_error("no CUDA device is visible to this process");
    // Not node_local_rank: that is collective over the world, and only the group's members are here.
    const int local_rank = std::max(launcher_local_rank(), 0);
    check_cuda(cudaSetDevice(local_rank % count), "cudaSetDevice");
    return local_rank % count;
  }();
  (void)device;
#endif
}

// Grow-only cudaMalloc'd scratch: the padded buffers of allgatherv/reduce_scatterv and, on host Kokkos
// backends, the device copy of host data that NCCL needs. Owned by the communicator rather than taken
// from the step's Workspace: collectives such as the gradient all-reduce run outside any workspace scope,
// where the workspace would cudaMalloc and cudaFree on every call, and a pooled communicator reuses this
// across steps. On host Kokkos backends it must be CUDA memory, which the workspace does not hold.
class DeviceScratch {
 public:
  DeviceScratch() = default;
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  ~DeviceScratch() {
    if (data_) cudaFree(data_);
  }
  float* get(std::size_t count) {
    if (count > capacity_) {
      if (data_) cudaFree(data_);
      data_ = nullptr;
      capacity_ = 0;
      check_cuda(cudaMalloc(&data_, count * sizeof(float)), "cudaMalloc (NCCL scratch)");
      capacity_ = count;
    }
    return data_;
  }

 private:
  float* data_ = nullptr;
  std::size_t capacity_ = 0;
};

// Collective over the members of `group` (their MPI sub-communicator): has group rank 0 make the NCCL id
// and broadcasts it. Local failures (no GPU, no id) are agreed on first, so every member throws together
// instead of some waiting forever in ncclCommInitRank.
ncclUniqueId bootstrap(const detail::GroupComm& group, const std::vector<int>& ranks) {
  const int rank = group.rank();
  ncclUniqueId id{};
  std::string error;
  try {
    if (!nccl().error.empty()) throw std::runtime_error(nccl().error);
    select_device();
    if (rank == 0) check_nccl(nccl().get_unique_id(&id), "ncclGetUniqueId");
  } catch (const std::exception& e) {
    error = e.what();
  }
  int ok = error.empty() ? 1 : 0, all_ok = 0;
  detail::check_mpi(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, group.get()), "MPI_Allreduce");
  if (!all_ok) {
    throw std::runtime_error(fmt::format("NCCL communicator for group {}: {}", ranks,
                                         error.empty() ? "setup failed on another member" : error));
  }
  detail::check_mpi(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, group.get()), "MPI_Bcast(ncclUniqueId)");
  return id;
}

// An all-reduce on the communicator's stream (iallreduce_sum): wait() polls the stream as the blocking
// collectives do (so a failed peer fails the run instead of hanging). Null `finish`: already complete.
class NcclRequest final : public CommRequest {
 public:
  explicit NcclRequest(std::function<void()> finish) : finish_(std::move(finish)) {}
  void wait() override {
    if (!finish_) return;
    std::function<void()> finish = std::move(finish_);
    finish_ = nullptr;
    finish();
  }

 private:
  std::function<void()> finish_;
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(MPI_Comm world, const std::vector<int>& ranks)
      : Communicator(ranks), group_(world, ranks), rank_(group_.rank()), size_(group_.size()) {
    const ncclUniqueId id = bootstrap(group_, ranks);
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    const ncclResult_t rc = nccl().comm_init_rank(&comm_, size_, id, rank_);
    if (rc != ncclSuccess) {
      cudaStreamDestroy(stream_);
      check_nccl(rc, "ncclCommInitRank");
    }
  }

  ~NcclCommunicator() override {
    if (comm_) nccl().comm_destroy(comm_);
    cudaStreamDestroy(stream_);
  }

  const char* backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce_sum(float* data, std::size_t count) override {
    require_usable();
    if (count == 0) return;
    step_fence();  // kernels writing `data` run on Kokkos's stream, not ours (nor all streams:
                   // a device-wide fence would wait for the buckets already in flight here)
    // Host Kokkos backend: NCCL needs device memory, so reduce a device copy (in place otherwise).
    float* buffer = kMemSpaceIsHostAccessible ? send_scratch_.get(count) : data;
    copy(buffer, data, count);
    check_nccl(nccl().all_reduce(buffer, buffer, count, ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
    copy(data, buffer, count);
    synchronize();
  }

  // In place on device memory, on this communicator's stream (the side stream: Kokkos's kernels go on
  // while it runs). Host Kokkos backends need a device copy, so there it is the blocking all-reduce.
  std::unique_ptr<CommRequest> iallreduce_sum(float* data, std::size_t count) override {
    if (kMemSpaceIsHostAccessible || count == 0) {
      allreduce_sum(data, count);
      return std::make_unique<NcclRequest>(nullptr);
    }
    require_usable();
    step_fence();  // kernels writing `data` run on Kokkos's stream, not ours (nor all streams:
                   // a device-wide fence would wait for the buckets already in flight here)
    check_nccl(nccl().all_reduce(data, data, count, ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
    // Waits for everything on the stream so far: requests are waited for in the order they were made.
    return std::make_unique<NcclRequest>([this] { synchronize(); });
  }

  // NCCL has only equal-count AllGather/ReduceScatter. Uneven counts are padded to the largest count:
  // one call keeps NCCL's bandwidth-optimal ring algorithm, where a v-variant would need one
  // ncclBroadcast/ncclReduce per rank or hand-written send/recv. The price, size * (max - mean) floats,
  // is small because minimllm's shards are nearly balanced. Padding values are never read back.
  void allgatherv(const float* send, std::size_t send_count, float* recv,
                  const std::vector<std::size_t>& recv_counts) override {
    require_usable();
    detail::check_allgatherv_args(send_count, recv_counts, rank_, size_);
    const std::size_t block = *std::max_element(recv_counts.begin(), recv_counts.end());
    if (block == 0) return;
    step_fence();  // Kokkos's stream only (see above)
    float* send_padded = send_scratch_.get(block);
    float* recv_padded = recv_scratch_.get(block * size_);
    copy(send_padded, send, send_count);
    check_nccl(nccl().all_gather(send_padded, recv_padded, block, ncclFloat, comm_, stream_),
               "ncclAllGather");
    std::size_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      copy(recv + offset, recv_padded + r * block, recv_counts[r]);
      offset += recv_counts[r];
    }
    synchronize();
  }

  void reduce_scatterv(const float* send, float* recv, const std::vector<std::size_t>& counts) override {
    require_usable();
    detail::check_reduce_scatterv_args(counts, size_);
    const std::size_t block = *std::max_element(counts.begin(), counts.end());
    if (block == 0) return;
    step_fence();  // Kokkos's stream only (see above)
    float* send_padded = send_scratch_.get(block * size_);
    float* recv_padded = recv_scratch_.get(block);
    std::size_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      copy(send_padded + r * block, send + offset, counts[r]);
      offset += counts[r];
    }
    check_nccl(nccl().reduce_scatter(send_padded, recv_padded, block, ncclFloat, ncclSum, comm_, stream_),
               "ncclReduceScatter");
    copy(recv, recv_padded, counts[rank_]);
    synchronize();
  }

  // Grouped point-to-point: one ncclSend/ncclRecv per peer with data, fused by NCCL into one launch; the
  // self block is a device copy on the same stream.
  void alltoallv(const float* send, const std::vector<std::size_t>& send_counts,
                 const std::vector<std::size_t>& send_displs, float* recv,
                 const std::vector<std::size_t>& recv_counts,
                 const std::vector<std::size_t>& recv_displs) override {
    require_usable();
    const detail::AlltoallvExtents extents =
        detail::check_alltoallv_args(send_counts, send_displs, recv_counts, recv_displs, rank_, size_);
    step_fence();  // Kokkos's stream only (see above)
    // Host Kokkos backend: NCCL needs device memory, so exchange device copies.
    const float* send_dev = send;
    float* recv_dev = recv;
    if constexpr (kMemSpaceIsHostAccessible) {
      float* staged = send_scratch_.get(extents.send);
      copy(staged, send, extents.send);
      send_dev = staged;
      recv_dev = recv_scratch_.get(extents.recv);
      if (extents.recv_has_gaps) copy(recv_dev, recv, extents.recv);
    }
    check_nccl(nccl().group_start(), "ncclGroupStart");
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      if (send_counts[r] > 0)
        check_nccl(nccl().send(send_dev + send_displs[r], send_counts[r], ncclFloat, r, comm_, stream_),
                   "ncclSend");
      if (recv_counts[r] > 0)
        check_nccl(nccl().recv(recv_dev + recv_displs[r], recv_counts[r], ncclFloat, r, comm_, stream_),
                   "ncclRecv");
    }
    check_nccl(nccl().group_end(), "ncclGroupEnd");
    copy(recv_dev + recv_displs[rank_], send_dev + send_displs[rank_], send_counts[rank_]);
    if (recv_dev != recv) copy(recv, recv_dev, extents.recv);
    synchronize();
  }

 private:
  // After ncclCommAbort the handle is gone (nulled): every later call fails here, clearly, instead of
  // handing NCCL a destroyed (or null) communicator.
  void require_usable() const {
    if (!comm_)
      throw std::runtime_error(fmt::format(
          "NCCL communicator of {} ranks (this rank {} of the group) was aborted after an earlier NCCL "
          "failure and cannot be used again",
          size_, rank_));
  }

  // cudaMemcpyDefault infers the direction, so one path serves host (staged) and device data.
  void copy(float* dst, const float* src, std::size_t count) {
    if (dst == src || count == 0) return;
    check_cuda(cudaMemcpyAsync(dst, src, count * sizeof(float), cudaMemcpyDefault, stream_),
               "cudaMemcpyAsync");
  }
  // Polls rather than blocks in cudaStreamSynchronize: a failed or vanished peer surfaces as NCCL's
  // asynchronous error (the communicator is then aborted and the run fails) instead of a hang.
  void synchronize() {
    for (;;) {
      const cudaError_t rc = cudaStreamQuery(stream_);
      if (rc == cudaSuccess) return;
      if (rc != cudaErrorNotReady) check_cuda(rc, "cudaStreamQuery");
      ncclResult_t async = ncclSuccess;
      require_usable();
      check_nccl(nccl().get_async_error(comm_, &async), "ncclCommGetAsyncError");
      if (async != ncclSuccess) {
        // Aborted, the handle is released: nulled so that nothing (the destructor, a later collective)
        // uses it again (require_usable).
        ncclComm_t aborted = comm_;
        comm_ = nullptr;
        nccl().comm_abort(aborted);
        check_nccl(async, "NCCL collective (communicator aborted)");
      }
      std::this_thread::yield();
    }
  }

  MPI_Comm host_comm() const override { return group_.get(); }

  detail::GroupComm group_;  // the members' MPI communicator: NCCL's bootstrap, point-to-point, host values
  int rank_ = 0, size_ = 0;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
  DeviceScratch send_scratch_, recv_scratch_;
};

}  // namespace

std::unique_ptr<Communicator> create_nccl_communicator(MPI_Comm world, const std::vector<int>& ranks) {
  return std::make_unique<NcclCommunicator>(world, ranks);
}

bool nccl_compiled() { return true; }

std::string nccl_library_version() {
  if (!nccl().error.empty()) return "not loaded: " + nccl().error;
  int version = 0;  // 22809 for 2.28.9 (NCCL >= 2.9 encodes major*10000 + minor*100 + patch)
  check_nccl(nccl().get_version(&version), "ncclGetVersion");
  return fmt::format("{}.{}.{}", version / 10000, version / 100 % 100, version % 100);
}

bool nccl_device_path_available(MPI_Comm world, std::string& why) {
  // Every rank takes part in the same collectives whatever its local answer, then all adopt the worst.
  std::string local_why;
  int device = -1;
  if (!nccl().error.empty()) {
    local_why = nccl().error;
  } else if constexpr (kMemSpaceIsHostAccessible) {
    local_why =
        fmt::format("the Kokkos execution space is {}, whose memory is host memory", ExecSpace::name());
  } else if (const cudaError_t rc = cudaGetDevice(&device); rc != cudaSuccess) {
    local_why = fmt::format("cudaGetDevice failed: {}", cudaGetErrorString(rc));
    device = -1;
  }
  // NCCL rejects two ranks of one communicator on one GPU. Compared by PCI bus id: device ordinals are
  // relative to each rank's CUDA_VISIBLE_DEVICES (Slurm's --gpus-per-task gives every rank "device 0").
  const int sharing = ranks_sharing_device(world);  // collective: every rank calls it
  if (local_why.empty() && sharing > 1) {
    local_why = fmt::format("{} ranks of this node drive the GPU at PCI bus {}; NCCL needs one GPU per rank",
                            sharing, device_bus_id());
  }
  int ok = local_why.empty() ? 1 : 0, all_ok = 0, world_rank = 0;
  MPI_Comm_rank(world, &world_rank);
  detail::check_mpi(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, world), "MPI_Allreduce");
  if (all_ok) return true;
  // The first failing rank's reason, so every rank reports the same one.
  int first_bad = ok ? INT_MAX : world_rank;
  detail::check_mpi(MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, world), "MPI_Allreduce");
  int length = static_cast<int>(local_why.size());
  MPI_Bcast(&length, 1, MPI_INT, first_bad, world);
  local_why.resize(length);
  MPI_Bcast(local_why.data(), length, MPI_CHAR, first_bad, world);
  why = local_why;
  return false;
}

#else  // !MINIMLLM_ENABLE_NCCL

std::unique_ptr<Communicator> create_nccl_communicator(MPI_Comm, const std::vector<int>&) {
  throw std::runtime_error("minimllm was built without NCCL (configure with -DMINIMLLM_ENABLE_NCCL=ON)");
}

bool nccl_compiled() { return false; }

std::string nccl_library_version() { return "not built with NCCL"; }

bool nccl_device_path_available(MPI_Comm, std::string& why) {
  why = "built without NCCL (configure with -DMINIMLLM_ENABLE_NCCL=ON)";
  return false;
}

#endif

}  // namespace minimllm
