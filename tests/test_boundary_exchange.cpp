// BoundaryExchange at any world size: routings that every rank derives from one seed, so each rank
// knows where every global row starts and ends and can check its own part exactly.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "minimllm/core/allocation_counter.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "minimllm/parallel/boundary_exchange.hpp"
#include "mpi_world.hpp"

namespace minimllm {
namespace {

using testing_support::world_rank;
using testing_support::world_size;

// Global row g moves from (src_rank[g], src_row[g]) to (dst_rank[g], dst_row[g]). Each rank's src and
// dst matrices have `spare` extra rows that no route names.
struct Routing {
  std::vector<int> src_rank, src_row, dst_rank, dst_row;
  std::vector<int> src_rows, dst_rows;  // matrix rows per rank
};

using Rng = std::mt19937_64;
// (source rank, destination rank) of one global row.
using RankChooser = std::function<std::pair<int, int>(Rng&, int ranks)>;

std::pair<int, int> any_to_any(Rng& rng, int ranks) {
  const int s = static_cast<int>(rng() % ranks);
  return {s, static_cast<int>(rng() % ranks)};
}

std::pair<int, int> self_only(Rng& rng, int ranks) {
  const int r = static_cast<int>(rng() % ranks);
  return {r, r};
}

std::pair<int, int> first_to_last(Rng&, int ranks) { return {0, ranks - 1}; }

// Fisher-Yates with the raw generator, so every rank draws the same permutation.
std::vector<int> permutation(int n, Rng& rng) {
  std::vector<int> p(n);
  for (int i = 0; i < n; ++i) p[i] = i;
  for (int i = n - 1; i > 0; --i) std::swap(p[i], p[rng() % (i + 1)]);
  return p;
}

Routing make_routing(int ranks, int rows, std::uint64_t seed, const RankChooser& choose, int spare = 2) {
  Rng rng(seed);
  Routing r;
  r.src_rank.resize(rows), r.dst_rank.resize(rows), r.src_row.resize(rows), r.dst_row.resize(rows);
  std::vector<std::vector<int>> src_of(ranks), dst_of(ranks);  // global rows per rank
  for (int g = 0; g < rows; ++g) {
    std::tie(r.src_rank[g], r.dst_rank[g]) = choose(rng, ranks);
    src_of[r.src_rank[g]].push_back(g);
    dst_of[r.dst_rank[g]].push_back(g);
  }
  // Slots are drawn from permutations, so rows land scattered and out of order on both ends.
  for (int p = 0; p < ranks; ++p) {
    r.src_rows.push_back(static_cast<int>(src_of[p].size()) + spare);
    r.dst_rows.push_back(static_cast<int>(dst_of[p].size()) + spare);
    const auto src_perm = permutation(r.src_rows[p], rng), dst_perm = permutation(r.dst_rows[p], rng);
    for (std::size_t k = 0; k < src_of[p].size(); ++k) r.src_row[src_of[p][k]] = src_perm[k];
    for (std::size_t k = 0; k < dst_of[p].size(); ++k) r.dst_row[dst_of[p][k]] = dst_perm[k];
  }
  return r;
}

// This rank's part of the routing; both ends list a pair's rows in increasing global order.
RowRoute route_of(const Routing& r, int me, int ranks) {
  RowRoute route;
  route.send_counts.assign(ranks, 0), route.recv_counts.assign(ranks, 0);
  for (int peer = 0; peer < ranks; ++peer) {
    for (std::size_t g = 0; g < r.src_rank.size(); ++g) {
      if (r.src_rank[g] == me && r.dst_rank[g] == peer) {
        route.send_rows.push_back(r.src_row[g]);
        ++route.send_counts[peer];
      }
      if (r.src_rank[g] == peer && r.dst_rank[g] == me) {
        route.recv_rows.push_back(r.dst_row[g]);
        ++route.recv_counts[peer];
      }
    }
  }
  return route;
}

// The rows travel over a communicator of the backend a run would choose here (NCCL on a GPU build with
// a GPU per rank, MPI otherwise), spanning the world.
std::shared_ptr<Communicator> wire() {
  std::vector<int> everyone(world_size());
  for (int r = 0; r < world_size(); ++r) everyone[r] = r;
  return choose_collectives(MPI_COMM_WORLD, "auto").factory(MPI_COMM_WORLD, everyone);
}

float encode(int g, int j, int width) { return static_cast<float>(g * width + j); }

constexpr float kUnsentSrc = -2.0f, kDstSentinel = -1.0f, kDsrcSentinel = -3.0f;

// Forward then backward of rows that encode their global id; checks every element of dst and d_src.
// point_to_point: the pipeline's variant (receives posted first, Isend per peer, finish before use).
void check_round_trip(const Routing& r, int width, bool point_to_point = false) {
  const int me = world_rank(), ranks = world_size();
  BoundaryExchange bx(wire(), route_of(r, me, ranks), width, /*tag=*/3);
  if (point_to_point) {
    bx.post_forward_receives();
    bx.post_backward_receives();
  }

  t_mat src("src", r.src_rows[me], width), dst("dst", r.dst_rows[me], width);
  auto src_h = Kokkos::create_mirror_view(src);
  Kokkos::deep_copy(src_h, kUnsentSrc);
  std::int64_t sent = 0, received = 0;
  for (std::size_t g = 0; g < r.src_rank.size(); ++g) {
    if (r.src_rank[g] == me) {
      for (int j = 0; j < width; ++j) src_h(r.src_row[g], j) = encode(static_cast<int>(g), j, width);
      sent += width * 4;
    }
    if (r.dst_rank[g] == me) received += width * 4;
  }
  Kokkos::deep_copy(src, src_h);
  Kokkos::deep_copy(dst, kDstSentinel);
  if (point_to_point) {
    bx.start_forward_sends(src, dst);
    bx.finish_forward_receives(dst);
  } else {
    bx.forward(src, dst);
  }
  EXPECT_EQ(bx.bytes_sent(), sent);
  EXPECT_EQ(bx.bytes_received(), received);

  auto dst_h = Kokkos::create_mirror_view_and_copy(HostSpace(), dst);
  auto expected = Kokkos::create_mirror_view(dst);
  Kokkos::deep_copy(expected, kDstSentinel);
  for (std::size_t g = 0; g < r.dst_rank.size(); ++g)
    if (r.dst_rank[g] == me)
      for (int j = 0; j < width; ++j) expected(r.dst_row[g], j) = encode(static_cast<int>(g), j, width);
  int wrong = 0;
  for (int i = 0; i < r.dst_rows[me]; ++i)
    for (int j = 0; j < width; ++j) wrong += dst_h(i, j) != expected(i, j);
  EXPECT_EQ(wrong, 0) << "forward: wrong dst elements on rank " << me;

  // Backward of the delivered rows must put each one back where it came from.
  t_mat d_src("d_src", r.src_rows[me], width);
  Kokkos::deep_copy(d_src, kDsrcSentinel);
  if (point_to_point) {
    bx.start_backward_sends(dst, d_src);
    bx.finish_backward_receives(d_src);
    bx.finish_sends();
  } else {
    bx.backward(dst, d_src);
  }
  auto d_src_h = Kokkos::create_mirror_view_and_copy(HostSpace(), d_src);
  Kokkos::deep_copy(src_h, kDsrcSentinel);  // now the expected d_src
  for (std::size_t g = 0; g < r.src_rank.size(); ++g)
    if (r.src_rank[g] == me)
      for (int j = 0; j < width; ++j) src_h(r.src_row[g], j) = encode(static_cast<int>(g), j, width);
  wrong = 0;
  for (int i = 0; i < r.src_rows[me]; ++i)
    for (int j = 0; j < width; ++j) wrong += d_src_h(i, j) != src_h(i, j);
  EXPECT_EQ(wrong, 0) << "backward: wrong d_src elements on rank " << me;
}

TEST(BoundaryExchange, RandomRoutingDeliversEveryRow) {
  const int ranks = world_size();
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    check_round_trip(make_routing(ranks, 7 * ranks + 3, seed, any_to_any), 7);
  }
}

TEST(BoundaryExchange, SelfSendsOnly) {
  const int ranks = world_size();
  check_round_trip(make_routing(ranks, 5 * ranks, 11, self_only), 5);
}

TEST(BoundaryExchange, RanksThatSendOrReceiveNothing) {
  const int ranks = world_size();
  check_round_trip(make_routing(ranks, 9, 12, first_to_last), 3);
  check_round_trip(make_routing(ranks, 0, 13, any_to_any, 0), 4);  // nobody moves anything
}

// The point-to-point variant delivers the same rows both ways, including self-sends and ranks that
// exchange nothing.
TEST(BoundaryExchange, PointToPointVariantDeliversTheSameRows) {
  const int ranks = world_size();
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    check_round_trip(make_routing(ranks, 7 * ranks + 3, seed, any_to_any), 7, true);
  }
  check_round_trip(make_routing(ranks, 5 * ranks, 11, self_only), 5, true);
  check_round_trip(make_routing(ranks, 9, 12, first_to_last), 3, true);
  check_round_trip(make_routing(ranks, 0, 13, any_to_any, 0), 4, true);
}

double dot_over_world(const t_mat& a, const t_mat& b) {
  auto a_h = Kokkos::create_mirror_view_and_copy(HostSpace(), a);
  auto b_h = Kokkos::create_mirror_view_and_copy(HostSpace(), b);
  double local = 0.0, total = 0.0;
  for (std::size_t i = 0; i < a_h.extent(0); ++i)
    for (std::size_t j = 0; j < a_h.extent(1); ++j) local += static_cast<double>(a_h(i, j)) * b_h(i, j);
  MPI_Allreduce(&local, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return total;
}

void fill_uniform(const t_mat& m, std::uint64_t seed) {
  Rng rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto h = Kokkos::create_mirror_view(m);
  for (std::size_t i = 0; i < h.extent(0); ++i)
    for (std::size_t j = 0; j < h.extent(1); ++j) h(i, j) = u(rng);
  Kokkos::deep_copy(m, h);
}

TEST(BoundaryExchange, BackwardIsTheAdjointOfForward) {
  const int me = world_rank(), ranks = world_size(), width = 16;
  const Routing r = make_routing(ranks, 11 * ranks + 1, 21, any_to_any);
  BoundaryExchange bx(wire(), route_of(r, me, ranks), width);
  t_mat x("x", r.src_rows[me], width), y("y", r.dst_rows[me], width);
  fill_uniform(x, 100 + me);
  fill_uniform(y, 200 + me);
  t_mat fx("fx", r.dst_rows[me], width), by("by", r.src_rows[me], width);  // zero-initialised
  bx.forward(x, fx);
  bx.backward(y, by);
  const double lhs = dot_over_world(fx, y), rhs = dot_over_world(x, by);
  EXPECT_NEAR(lhs, rhs, 1e-6 * std::abs(lhs));
  EXPECT_NE(lhs, 0.0);
}

TEST(BoundaryExchange, SteadyStateCallsAllocateNothing) {
  const int me = world_rank(), ranks = world_size(), width = 8;
  const Routing r = make_routing(ranks, 13 * ranks, 31, any_to_any);
  BoundaryExchange bx(wire(), route_of(r, me, ranks), width);
  t_mat src("src", r.src_rows[me], width), dst("dst", r.dst_rows[me], width);
  Workspace workspace;  // as a step's: the packed rows come from it
  {
    const WorkspaceScope warm_up(workspace);  // grows the arena when it closes
    bx.forward(src, dst);
    bx.backward(dst, src);
  }
  Kokkos::fence();
  std::int64_t allocations = 0;
  {
    const AllocationCounter counter;  // every memory space
    for (int call = 0; call < 3; ++call) {
      const WorkspaceScope step(workspace);
      bx.forward(src, dst);
      bx.backward(dst, src);
    }
    Kokkos::fence();
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0);
}

// One MPI wire for the many constructions that must fail (creating NCCL communicators for each would
// only cost time: the route is rejected before any row moves).
std::shared_ptr<Communicator> wire_for_rejections() {
  static std::shared_ptr<Communicator> mpi_wire = [] {
    std::vector<int> everyone(world_size());
    for (int r = 0; r < world_size(); ++r) everyone[r] = r;
    return std::shared_ptr<Communicator>(create_mpi_communicator(MPI_COMM_WORLD, everyone));
  }();
  return mpi_wire;
}

// Constructing must throw std::invalid_argument on every rank, with `text` in the message on `on_rank`.
void expect_rejected(const RowRoute& route, int width, int on_rank, const std::string& text) {
  try {
    BoundaryExchange bx(wire_for_rejections(), route, width);
    ADD_FAILURE() << "rank " << world_rank() << ": route accepted";
  } catch (const std::invalid_argument& e) {
    if (world_rank() == on_rank) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  }
}

RowRoute empty_route(int ranks) {
  RowRoute route;
  route.send_counts.assign(ranks, 0), route.recv_counts.assign(ranks, 0);
  return route;
}

// Rank 0 sends send_rows to itself and stores them at recv_rows; the other ranks move nothing.
RowRoute self_route(int ranks, std::vector<int> send_rows, std::vector<int> recv_rows) {
  RowRoute route = empty_route(ranks);
  if (world_rank() == 0) {
    route.send_counts[0] = static_cast<int>(send_rows.size());
    route.recv_counts[0] = static_cast<int>(recv_rows.size());
    route.send_rows = std::move(send_rows), route.recv_rows = std::move(recv_rows);
  }
  return route;
}

TEST(BoundaryExchange, RejectsWrongCountsSize) {
  const int ranks = world_size(), last = ranks - 1;
  RowRoute route = empty_route(ranks);
  route.send_counts.push_back(0);
  expect_rejected(route, 4, 0, "send_counts has " + std::to_string(ranks + 1) + " entries");
  // Only one rank is wrong: the others still throw, naming it, rather than waiting for it later.
  route = empty_route(ranks);
  if (world_rank() == last) route.recv_counts.pop_back();
  expect_rejected(route, 4, last, "recv_counts has " + std::to_string(ranks - 1) + " entries");
  if (ranks > 1) expect_rejected(route, 4, 0, "invalid on rank " + std::to_string(last));
}

TEST(BoundaryExchange, RejectsBadCountsAndRows) {
  const int ranks = world_size();
  RowRoute route = self_route(ranks, {0}, {0});
  if (world_rank() == 0) route.send_counts[0] = -1;
  expect_rejected(route, 4, 0, "is negative");
  route = self_route(ranks, {0, 1}, {0, 1});
  if (world_rank() == 0) route.recv_counts[0] = 1;
  expect_rejected(route, 4, 0, "recv_counts sum to 1 but recv_rows has 2 rows");
  expect_rejected(self_route(ranks, {3, 5, 3}, {0, 1, 2}), 4, 0, "send_rows names row 3 more than once");
  expect_rejected(self_route(ranks, {0, 1}, {4, 4}), 4, 0, "recv_rows names row 4 more than once");
  expect_rejected(self_route(ranks, {-1}, {0}), 4, 0, "negative row");
  expect_rejected(empty_route(ranks), 0, 0, "width must be positive");
}

TEST(BoundaryExchange, RejectsCountsBeyondInt) {
  // 3 rows of 2^30 floats: the float count would overflow MPI's int (nothing is allocated).
  expect_rejected(self_route(world_size(), {0, 1, 2}, {0, 1, 2}), 1 << 30, 0, "INT_MAX");
}

TEST(BoundaryExchange, RejectsPairsThatDisagree) {
  // Rank 0 sends one row to the last rank, which expects two: both ends name the pair, nobody hangs.
  const int ranks = world_size(), last = ranks - 1, me = world_rank();
  RowRoute route = empty_route(ranks);
  if (me == 0) route.send_counts[last] = 1, route.send_rows = {0};
  if (me == last) route.recv_counts[0] = 2, route.recv_rows = {0, 1};
  const std::string lhs = "rank " + std::to_string(last), rhs = "rank 0";
  expect_rejected(route, 4, last, lhs + " expects 2 rows from " + rhs + ", which sends 1");
  if (ranks > 1) expect_rejected(route, 4, 0, "rank 0 sends 1 rows to " + lhs + ", which expects 2");
}

TEST(BoundaryExchange, RejectsDifferentWidths) {
  if (world_size() < 2) GTEST_SKIP() << "needs two ranks";
  expect_rejected(empty_route(world_size()), 4 + world_rank(), 0,
                  "rank 0 has width 4 but rank 1 has width 5");
}

TEST(BoundaryExchange, RejectsARouteSizedForAnotherWireAndNoWire) {
  auto self = std::shared_ptr<Communicator>(create_mpi_communicator(MPI_COMM_WORLD, {world_rank()}));
  if (world_size() == 1) GTEST_SKIP() << "a singleton is the world here";
  // The route names every world rank, the wire only this one.
  EXPECT_THROW(BoundaryExchange(self, empty_route(world_size()), 4), std::invalid_argument);
  EXPECT_THROW(BoundaryExchange(nullptr, empty_route(world_size()), 4), std::invalid_argument);
}

TEST(BoundaryExchange, RowsOutsideTheViewsThrowBeforeCommunicating) {
  // A ring: every rank sends its row 1 to the next rank's row 1, so every rank checks rows on both ends.
  const int me = world_rank(), ranks = world_size(), width = 4;
  RowRoute route = empty_route(ranks);
  route.send_counts[(me + 1) % ranks] = 1, route.send_rows = {1};
  route.recv_counts[(me + ranks - 1) % ranks] = 1, route.recv_rows = {1};
  BoundaryExchange bx(wire(), route, width);
  t_mat small("small", 1, width), ok("ok", 2, width), narrow("narrow", 2, width - 1);
  EXPECT_THROW(bx.forward(small, ok), std::out_of_range);
  EXPECT_THROW(bx.forward(ok, small), std::out_of_range);
  EXPECT_THROW(bx.backward(small, ok), std::out_of_range);
  EXPECT_THROW(bx.backward(ok, small), std::out_of_range);
  EXPECT_THROW(bx.forward(narrow, ok), std::invalid_argument);
  // Nothing was started, so a valid call right after still pairs up on every rank.
  Kokkos::deep_copy(ok, static_cast<float>(me));
  t_mat out("out", 2, width);
  bx.forward(ok, out);
  auto out_h = Kokkos::create_mirror_view_and_copy(HostSpace(), out);
  EXPECT_EQ(out_h(1, 0), static_cast<float>((me + ranks - 1) % ranks));
  EXPECT_EQ(out_h(0, 0), 0.0f);
}

}  // namespace
}  // namespace minimllm
