// BoundaryExchange: moves rows (e.g. image embeddings) from the ranks that produce them to the ranks
// that consume them, and their gradients back, over one all-to-all each way (Communicator::alltoallv:
// MPI_Alltoallv, or grouped NCCL send/recv on device memory). It is the only place where the encoder
// layout and the LLM layout meet; backward() is the exact adjoint of forward().
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "minimllm/core/types.hpp"
#include "minimllm/layout/row_route.hpp"
#include "minimllm/parallel/communicator.hpp"

namespace minimllm {

class BoundaryExchange {
 public:
  // width: floats per row. The rows travel over `wire`; the route's counts name its ranks (one per
  // group rank, group rank order). Validates the route against every peer's (throws
  // std::invalid_argument on every rank together; collective over wire's ranks). Uploads the row lists
  // to MemSpace here, so forward() and backward() move no data between host and device. tag: separates
  // the point-to-point messages of exchanges in flight at the same time (below); 2 * tag + 1 must not
  // exceed wire->max_tag().
  BoundaryExchange(std::shared_ptr<Communicator> wire, RowRoute route, int width, int tag = 0);
  ~BoundaryExchange();
  BoundaryExchange(const BoundaryExchange&) = delete;
  BoundaryExchange& operator=(const BoundaryExchange&) = delete;

  // dst(recv_rows) = src(send_rows) of the sending rank. Rows of dst not named are left untouched. The
  // packed rows live in the active Workspace for the call (scratch_view), a plain allocation without one.
  void forward(const t_mat_const& src, const t_mat& dst);
  // The adjoint: d_src(send_rows) = d_dst(recv_rows) of the receiving rank. Rows of d_src not named are
  // left untouched.
  void backward(const t_mat_const& d_dst, const t_mat& d_src);

  // Point-to-point variant, for pipelines where several exchanges are in flight and a rank must not wait
  // for ranks it exchanges nothing with: post the receives early, start the sends once the rows exist
  // (pack, then one message per peer, Communicator::isend; rows to this rank itself go straight to dst),
  // and finish the receives just before the rows are used (wait, then unpack; a second finish does
  // nothing). Same rows and adjoint as forward() and backward(). Each direction has its own packed
  // buffers, taken from the active Workspace's innermost open scope when posting or sending, so that
  // scope must stay open until finish_sends (without an active workspace: allocations of this object).
  // The sends must be finished (finish_sends) before the object goes away.
  void post_forward_receives();
  void start_forward_sends(const t_mat_const& src, const t_mat& dst);
  void finish_forward_receives(const t_mat& dst);
  void post_backward_receives();
  void start_backward_sends(const t_mat_const& d_dst, const t_mat& d_src);
  void finish_backward_receives(const t_mat& d_src);
  void finish_sends();

  std::int64_t bytes_sent() const;      // per call, this rank
  std::int64_t bytes_received() const;  // per call, this rank

 private:
  std::shared_ptr<Communicator> wire_;
  RowRoute route_;
  int width_;
  t_ivec send_rows_, recv_rows_;                // device copies of the row lists
  std::vector<int> send_displs_, recv_displs_;  // in rows
  // The collective's wire layout in floats (every peer's rows but this rank's own), per side.
  std::vector<std::size_t> send_wire_counts_, send_wire_displs_, recv_wire_counts_, recv_wire_displs_;
  int tag_ = 0;
  struct Async;                   // buffers and requests of the point-to-point variant
  std::unique_ptr<Async> async_;  // created on first use
  Async& async();
};

}  // namespace minimllm
