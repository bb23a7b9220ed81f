#include "minimllm/parallel/boundary_exchange.hpp"

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include "minimllm/kernels/workspace.hpp"

namespace minimllm {
namespace {

using RowPolicy = Kokkos::TeamPolicy<ExecSpace>;
using RowMember = RowPolicy::member_type;

// One team per row; host teams have one thread, so a row is a plain vectorisable loop.
RowPolicy row_policy(int rows) {
  constexpr bool host_exec = std::is_same<ExecSpace, Kokkos::DefaultHostExecutionSpace>::value;
  return host_exec ? RowPolicy(rows, 1) : RowPolicy(rows, Kokkos::AUTO);
}

// Rows a rank sends itself: from_rows[from_begin + k] goes to to_rows[to_begin + k], k < count.
struct SelfRows {
  int from_begin, to_begin, count;
};

template <class Dst, class Src>
KOKKOS_INLINE_FUNCTION void copy_row(const RowMember& team, const Dst& dst, int dst_row, const Src& src,
                                     int src_row) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, static_cast<int>(dst.extent(1))),
                       [&](int j) { dst(dst_row, j) = src(src_row, j); });
}

// Packs in(from_rows) in wire order (self rows left out), and copies self rows straight to `out`.
void pack(const t_mat_const& in, const t_ivec& from_rows, const SelfRows self, const t_mat_um& packed,
          const t_mat& out, const t_ivec& to_rows) {
  Kokkos::parallel_for(
      "minimllm::BoundaryExchange::pack", row_policy(static_cast<int>(from_rows.extent(0))),
      KOKKOS_LAMBDA(const RowMember& team) {
        const int i = team.league_rank();
        const int k = i - self.from_begin;
        if (k >= 0 && k < self.count) {
          copy_row(team, out, to_rows(self.to_begin + k), in, from_rows(i));
        } else {
          copy_row(team, packed, k < 0 ? i : i - self.count, in, from_rows(i));
        }
      });
}

// out(to_rows) = packed rows in wire order, skipping the self rows pack() already placed.
void unpack(const t_mat_const& packed, const SelfRows self, const t_mat& out, const t_ivec& to_rows) {
  Kokkos::parallel_for(
      "minimllm::BoundaryExchange::unpack", row_policy(static_cast<int>(packed.extent(0))),
      KOKKOS_LAMBDA(const RowMember& team) {
        const int w = team.league_rank();
        copy_row(team, out, to_rows(w < self.to_begin ? w : w + self.count), packed, w);
      });
}

// One end of the exchange on this rank: rows per peer, their offsets, and the row list itself.
struct Side {
  const std::vector<int>& counts;
  const std::vector<int>& displs;
  const std::vector<int>& rows;
  const t_ivec& rows_dev;
  const char* name;  // for messages: "send" or "recv"
};

void check_view(const char* what, const char* view_name, std::size_t extent0, std::size_t extent1, int width,
                const Side& side) {
  if (extent1 != static_cast<std::size_t>(width))
    throw std::invalid_argument(std::string(what) + ": " + view_name + " has " + std::to_string(extent1) +
                                " columns, the exchange has width " + std::to_string(width));
  // Linear scan rather than a cached maximum: the header has no slot for one, and rows << floats moved.
  if (side.rows.empty()) return;
  const int max_row = *std::max_element(side.rows.begin(), side.rows.end());
  if (static_cast<std::size_t>(max_row) >= extent0)
    throw std::out_of_range(std::string(what) + ": " + side.name + " row " + std::to_string(max_row) +
                            " is outside " + view_name + " (" + std::to_string(extent0) + " rows)");
}

// Counts and displacements in floats for the wire layout: every peer's rows but this rank's own.
void wire_layout(const Side& side, int me, int width, std::vector<std::size_t>& counts,
                 std::vector<std::size_t>& displs) {
  counts.resize(side.counts.size());  // no allocation once sized for this world
  displs.resize(side.counts.size());
  const auto width_z = static_cast<std::size_t>(width);
  for (std::size_t p = 0; p < side.counts.size(); ++p) {
    const int p_int = static_cast<int>(p);
    counts[p] = p_int == me ? 0 : static_cast<std::size_t>(side.counts[p]) * width_z;
    displs[p] = static_cast<std::size_t>(side.displs[p] - (p_int > me ? side.counts[me] : 0)) * width_z;
  }
}

// The wire layout of one side, in floats.
struct WireLayout {
  const std::vector<std::size_t>& counts;
  const std::vector<std::size_t>& displs;
};

// Forward and backward alike: out(to.rows) on every receiver = in(from.rows) on every sender. Rows that
// stay on this rank are copied directly, never packed or handed to the communicator. The packed rows
// live in the active workspace for this call: a fresh BoundaryExchange per step then allocates nothing
// once the arena has grown.
void exchange(Communicator& wire, int width, const char* what, const t_mat_const& in, const char* in_name,
              const Side& from, const WireLayout& from_wire, const t_mat& out, const char* out_name,
              const Side& to, const WireLayout& to_wire) {
  check_view(what, in_name, in.extent(0), in.extent(1), width, from);
  check_view(what, out_name, out.extent(0), out.extent(1), width, to);
  const int me = wire.rank();
  const SelfRows self{from.displs[me], to.displs[me], from.counts[me]};

  const std::size_t width_z = static_cast<std::size_t>(width);
  const std::size_t wire_out = from.rows.size() - self.count, wire_in = to.rows.size() - self.count;
  const WorkspaceScope scope;
  const t_mat packed_out = scratch_view<t_mat>("minimllm::BoundaryExchange::out", wire_out, width_z);
  const t_mat packed_in = scratch_view<t_mat>("minimllm::BoundaryExchange::in", wire_in, width_z);

  pack(in, from.rows_dev, self, t_mat_um(packed_out.data(), wire_out, width_z), out, to.rows_dev);
  // The communicator fences before it reads what the pack kernel wrote.
  wire.alltoallv(packed_out.data(), from_wire.counts, from_wire.displs, packed_in.data(), to_wire.counts,
                 to_wire.displs);
  unpack(packed_in, self, out, to.rows_dev);
}

// Checks one side of the route on this rank alone; returns the first problem, or "" if none.
std::string side_error(const std::string& name, const std::vector<int>& counts, const std::vector<int>& rows,
                       int width, int ranks) {
  if (counts.size() != static_cast<std::size_t>(ranks))
    return name + "_counts has " + std::to_string(counts.size()) + " entries, the wire communicator has " +
           std::to_string(ranks) + " ranks";
  std::int64_t total = 0;
  for (std::size_t p = 0; p < counts.size(); ++p) {
    if (counts[p] < 0)
      return name + "_counts[" + std::to_string(p) + "] is negative (" + std::to_string(counts[p]) + ")";
    total += counts[p];
  }
  if (total != static_cast<std::int64_t>(rows.size()))
    return name + "_counts sum to " + std::to_string(total) + " but " + name + "_rows has " +
           std::to_string(rows.size()) + " rows";
  // MPI counts and displacements are int, in floats (the NCCL backend would not need this).
  if (total * width > INT_MAX)
    return std::to_string(total) + " " + name + " rows of width " + std::to_string(width) + " are " +
           std::to_string(total * width) + " floats, more than an MPI count can hold (INT_MAX)";
  std::vector<int> sorted(rows);
  std::sort(sorted.begin(), sorted.end());
  if (!sorted.empty() && sorted.front() < 0)
    return name + "_rows holds a negative row (" + std::to_string(sorted.front()) + ")";
  // Each row named once: backward then overwrites d_src rows instead of having to sum into them.
  const auto dup = std::adjacent_find(sorted.begin(), sorted.end());
  if (dup != sorted.end()) return name + "_rows names row " + std::to_string(*dup) + " more than once";
  return "";
}

std::string local_route_error(const RowRoute& r, int width, int ranks) {
  if (width <= 0) return "width must be positive, got " + std::to_string(width);
  const std::string send = side_error("send", r.send_counts, r.send_rows, width, ranks);
  return send.empty() ? side_error("recv", r.recv_counts, r.recv_rows, width, ranks) : send;
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  for (std::size_t p = 1; p < counts.size(); ++p) displs[p] = displs[p - 1] + counts[p - 1];
  return displs;
}

}  // namespace

BoundaryExchange::BoundaryExchange(std::shared_ptr<Communicator> wire, RowRoute route, int width, int tag)
    : wire_(std::move(wire)), route_(std::move(route)), width_(width), tag_(tag) {
  if (!wire_) throw std::invalid_argument("BoundaryExchange: no wire communicator (null)");
  const int rank = wire_->rank(), ranks = wire_->size();
  std::string error = local_route_error(route_, width_, ranks);

  // Both ends of every pair must agree on the row count, or Alltoallv would hang or corrupt. Each rank
  // tells each peer (rows I send you, rows I expect from you, my width); -1 marks a route already bad.
  constexpr int kFields = 3;
  std::vector<int> mine(static_cast<std::size_t>(ranks) * kFields, -1);
  if (error.empty()) {
    for (int p = 0; p < ranks; ++p) {
      mine[p * kFields + 0] = route_.send_counts[p];
      mine[p * kFields + 1] = route_.recv_counts[p];
      mine[p * kFields + 2] = width_;
    }
  }
  const std::vector<int> theirs = wire_->alltoall(mine, kFields);
  const std::string me = "rank " + std::to_string(rank);
  for (int s = 0; s < ranks && error.empty(); ++s) {
    const int sends_me = theirs[s * kFields + 0], expects = theirs[s * kFields + 1];
    const int width_s = theirs[s * kFields + 2];
    const std::string peer = "rank " + std::to_string(s);
    if (sends_me < 0) continue;  // that rank reports its own error
    if (width_s != width_)
      error = me + " has width " + std::to_string(width_) + " but " + peer + " has width " +
              std::to_string(width_s);
    else if (sends_me != route_.recv_counts[s])
      error = me + " expects " + std::to_string(route_.recv_counts[s]) + " rows from " + peer +
              ", which sends " + std::to_string(sends_me);
    else if (expects != route_.send_counts[s])
      error = me + " sends " + std::to_string(route_.send_counts[s]) + " rows to " + peer +
              ", which expects " + std::to_string(expects);
  }

  // All ranks throw together, so none goes on to an exchange that would wait forever.
  const int first_bad = wire_->allreduce_min(error.empty() ? ranks : rank);
  if (first_bad < ranks) {
    if (error.empty())
      error = "the route is invalid on rank " + std::to_string(first_bad) + " (see its error)";
    throw std::invalid_argument("BoundaryExchange: " + error);
  }

  send_rows_ = to_device(route_.send_rows, "minimllm::BoundaryExchange::send_rows");
  recv_rows_ = to_device(route_.recv_rows, "minimllm::BoundaryExchange::recv_rows");
  send_displs_ = displacements(route_.send_counts);
  recv_displs_ = displacements(route_.recv_counts);
  const Side send{route_.send_counts, send_displs_, route_.send_rows, send_rows_, "send"};
  const Side recv{route_.recv_counts, recv_displs_, route_.recv_rows, recv_rows_, "recv"};
  wire_layout(send, rank, width_, send_wire_counts_, send_wire_displs_);
  wire_layout(recv, rank, width_, recv_wire_counts_, recv_wire_displs_);
}

void BoundaryExchange::forward(const t_mat_const& src, const t_mat& dst) {
  const Side send{route_.send_counts, send_displs_, route_.send_rows, send_rows_, "send"};
  const Side recv{route_.recv_counts, recv_displs_, route_.recv_rows, recv_rows_, "recv"};
  exchange(*wire_, width_, "BoundaryExchange::forward", src, "src", send,
           {send_wire_counts_, send_wire_displs_}, dst, "dst", recv, {recv_wire_counts_, recv_wire_displs_});
}

void BoundaryExchange::backward(const t_mat_const& d_dst, const t_mat& d_src) {
  const Side send{route_.send_counts, send_displs_, route_.send_rows, send_rows_, "send"};
  const Side recv{route_.recv_counts, recv_displs_, route_.recv_rows, recv_rows_, "recv"};
  exchange(*wire_, width_, "BoundaryExchange::backward", d_dst, "d_dst", recv,
           {recv_wire_counts_, recv_wire_displs_}, d_src, "d_src", send,
           {send_wire_counts_, send_wire_displs_});
}

// ---------------------------------------------------------------------------------------------------
// Point-to-point variant

namespace {
struct AsyncDirection {
  t_vec wire_out, wire_in;  // packed rows to / from the peers (this rank's own rows excluded)
  std::unique_ptr<CommRequest> receives;
  bool pending = false;  // receives posted and not yet finished
};
}  // namespace

struct BoundaryExchange::Async {
  AsyncDirection forward, backward;
  std::vector<std::unique_ptr<CommRequest>> sends;
};

BoundaryExchange::~BoundaryExchange() = default;

BoundaryExchange::Async& BoundaryExchange::async() {
  if (!async_) async_ = std::make_unique<Async>();
  return *async_;
}

namespace {

// Wire offset (in rows) of peer p's rows: every peer's rows but this rank's own, in rank order.
int wire_offset(const Side& side, int p, int me) { return side.displs[p] - (p > me ? side.counts[me] : 0); }

// One message per peer with rows on this side, at its wire offset.
std::vector<MessageBlock> peer_blocks(const Side& side, int width, int me) {
  std::vector<MessageBlock> blocks;
  for (std::size_t p = 0; p < side.counts.size(); ++p) {
    const int p_int = static_cast<int>(p);
    if (p_int == me || side.counts[p] == 0) continue;
    blocks.push_back({p_int, static_cast<std::size_t>(wire_offset(side, p_int, me)) * width,
                      static_cast<std::size_t>(side.counts[p]) * width});
  }
  return blocks;
}

void post_receives(Communicator& wire, int width, int tag, const Side& to, AsyncDirection& d) {
  if (d.pending) throw std::logic_error("BoundaryExchange: receives posted twice without finishing");
  d.pending = true;
  const int me = wire.rank();
  const std::size_t floats = (to.rows.size() - to.counts[me]) * static_cast<std::size_t>(width);
  // Held until finish_receives, past the model's passes: from the caller's scope (see the header).
  d.wire_in = scratch_view<t_vec>("minimllm::BoundaryExchange::async_in", floats);
  d.receives = wire.irecv(d.wire_in.data(), floats, peer_blocks(to, width, me), tag);
}

void start_sends(Communicator& wire, int width, int tag, const char* what, const t_mat_const& in,
                 const Side& from, const t_mat& out, const Side& to, AsyncDirection& d,
                 std::vector<std::unique_ptr<CommRequest>>& sends) {
  check_view(what, "source", in.extent(0), in.extent(1), width, from);
  check_view(what, "destination", out.extent(0), out.extent(1), width, to);
  const int me = wire.rank();
  const SelfRows self{from.displs[me], to.displs[me], from.counts[me]};
  const std::size_t wire_rows = from.rows.size() - self.count, floats = wire_rows * width;
  d.wire_out = scratch_view<t_vec>("minimllm::BoundaryExchange::async_out", floats);
  pack(in, from.rows_dev, self, t_mat_um(d.wire_out.data(), wire_rows, width), out, to.rows_dev);
  // isend fences before it reads what the pack kernel wrote.
  sends.push_back(wire.isend(d.wire_out.data(), floats, peer_blocks(from, width, me), tag));
}

void finish_receives(const Communicator& wire, int width, const char* what, const t_mat& out,
                     const Side& from, const Side& to, AsyncDirection& d) {
  if (!d.pending) return;  // finished already
  d.pending = false;
  check_view(what, "destination", out.extent(0), out.extent(1), width, to);
  d.receives->wait();
  d.receives.reset();
  const int me = wire.rank();
  const SelfRows self{from.displs[me], to.displs[me], from.counts[me]};
  const std::size_t wire_rows = to.rows.size() - self.count;
  unpack(t_mat_um(d.wire_in.data(), wire_rows, width), self, out, to.rows_dev);
}

}  // namespace

void BoundaryExchange::post_forward_receives() {
  const Side recv{route_.recv_counts, recv_displs_, route_.recv_rows, recv_rows_, "recv"};
  post_receives(*wire_, width_, 2 * tag_, recv, async().forward);
}

void BoundaryExchange::start_forward_sends(const t_mat_const& src, const t_mat& dst) {
  const Side send{route_.send_counts, send_displs_, route_.send_rows, send_rows_, "send"};
  const Side recv{route_.recv_counts, recv_displs_, route_.recv_rows, recv_rows_, "recv"};
  start_sends(*wire_, width_, 2 * tag_, "BoundaryExchange::start_forward_sends", src, send, dst, recv,
              async().forward, async().sends);
}

void BoundaryExchange::finish_forward_receives(const t_mat& dst) {
  const Side send{route_.send_counts, send_displs_, route_.send_rows, send_rows_, "send"};
  const Side recv{route_.recv_counts, recv_displs_, route_.recv_rows, recv_rows_, "recv"};
  finish_receives(*wire_, width_, "BoundaryExchange::finish_forward_receives", dst, send, recv,
                  async().forward);
}

void BoundaryExchange::post_backward_receives() {
  const Side send{route_.send_counts, send_displs_, route_.send_rows, send_rows_, "send"};
  post_receives(*wire_, width_, 2 * tag_ + 1, send, async().backward);
}

void BoundaryExchange::start_backward_sends(const t_mat_const& d_dst, const t_mat& d_src) {
  const Side send{route_.send_counts, send_displs_, route_.send_rows, send_rows_, "send"};
  const Side recv{route_.recv_counts, recv_displs_, route_.recv_rows, recv_rows_, "recv"};
  start_sends(*wire_, width_, 2 * tag_ + 1, "BoundaryExchange::start_backward_sends", d_dst, recv, d_src,
              send, async().backward, async().sends);
}

void BoundaryExchange::finish_backward_receives(const t_mat& d_src) {
  const Side send{route_.send_counts, send_displs_, route_.send_rows, send_rows_, "send"};
  const Side recv{route_.recv_counts, recv_displs_, route_.recv_rows, recv_rows_, "recv"};
  finish_receives(*wire_, width_, "BoundaryExchange::finish_backward_receives", d_src, recv, send,
                  async().backward);
}

void BoundaryExchange::finish_sends() {
  if (!async_) return;
  for (const std::unique_ptr<CommRequest>& send : async_->sends) send->wait();
  async_->sends.clear();
}

std::int64_t BoundaryExchange::bytes_sent() const {
  return static_cast<std::int64_t>(route_.send_rows.size()) * width_ *
         static_cast<std::int64_t>(sizeof(float));
}

std::int64_t BoundaryExchange::bytes_received() const {
  return static_cast<std::int64_t>(route_.recv_rows.size()) * width_ *
         static_cast<std::int64_t>(sizeof(float));
}

}  // namespace minimllm
