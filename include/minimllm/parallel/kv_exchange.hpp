// Context parallelism inside an LLM group of g ranks: each rank holds a contiguous chunk of every
// sample's rows. Attention stays exact by all-gathering K and V of the whole samples (then each rank
// attends its own queries against them) and reduce-scattering their gradients back to the owners.
#pragma once

#include <memory>

#include "minimllm/core/phase.hpp"
#include "minimllm/kernels/attention.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/parallel/communicator.hpp"

namespace minimllm {

class KvExchange {
 public:
  // width: floats per row of K|V (2 x model width). The communicator is the group's. Uploads the row
  // order to MemSpace here; gather() and reduce() move no data between host and device themselves (the
  // communicator may, when it stages device buffers through the host). The staging buffers of each call
  // come from the active Workspace (the model's LLM pass), in a scope of that call.
  KvExchange(std::shared_ptr<Communicator> group, const MicroBatchWork& mb, int width);

  int full_rows() const { return full_rows_; }
  // kv_full [full rows, width] (sample-major) = all members' kv_local rows.
  void gather(const t_mat_strided_const& kv_local, const t_mat& kv_full);
  // kv_local_grad (overwritten) = sum over members of their d_kv_full rows that belong to this rank.
  void reduce(const t_mat_const& d_kv_full, const t_mat_strided& kv_local_grad);

  // Spent in gather and reduce so far (fenced; each call a Kokkos Tools region minimllm::kv_exchange).
  double seconds() const { return times_[Phase::kv_exchange]; }

 private:
  struct Staging {
    t_mat local, rank_major;  // this rank's rows; every member's rows in rank order
  };
  Staging staging() const;  // from the active workspace's innermost scope

  std::shared_ptr<Communicator> group_;
  int width_, full_rows_, local_rows_;
  std::vector<std::size_t> member_floats_;
  t_ivec kv_order_, identity_;  // sample-major row -> rank-major row, and 0..full_rows-1
  PhaseTimes times_;
};

}  // namespace minimllm
