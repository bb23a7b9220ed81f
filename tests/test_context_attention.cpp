// Context-parallel attention (parallel.cp_comm) at any world size, the world one group: every mechanism
// gives each member's rows the attention output, log-sum-exp and Q|K|V gradients of one attention pass
// over the whole sequences, computed here on every rank from the same seeded inputs. Samples shorter
// than the group leave members with empty chunks. And a finite-difference check of the ring's backward
// on its own. The heads (12) divide over groups of 1-4, as a2a needs; a group that does not divide them
// runs the ring.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "minimllm/kernels/attention.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/parallel/context_attention.hpp"
#include "mpi_world.hpp"

namespace minimllm {
namespace {

using testing_support::world_rank;
using testing_support::world_size;

constexpr AttentionShape kShape{12, 4};
constexpr int kWidth = kShape.heads * kShape.head_dim;

// A micro-batch of samples cut into the members' chunks as derive_rank_work cuts them (two per sample and
// member, load_balanced_chunks), with the gathered mechanism's row order and this rank's segments against
// the gathered keys (step/packing.cpp's).
struct Split {
  MicroBatchWork mb;
  std::vector<int> local_to_global;  // this rank's rows -> sample-major rows
  SegmentTable gathered;
};

Split split(const std::vector<int>& lengths, int members, int me) {
  Split s;
  s.mb.member_rows.assign(members, 0);
  s.mb.member_chunks.assign(members, {});
  s.mb.sample_offsets.assign(1, 0);
  for (int n : lengths) s.mb.sample_offsets.push_back(s.mb.sample_offsets.back() + n);
  for (size_t j = 0; j < lengths.size(); ++j) {
    s.mb.samples.push_back(static_cast<int>(j));
    for (int p = 0; p < members; ++p)
      for (const RowRange& r : load_balanced_chunks(lengths[j], members, p)) {
        s.mb.member_chunks[p].push_back({static_cast<int>(j), r.begin, r.end});
        s.mb.member_rows[p] += r.end - r.begin;
      }
  }
  s.mb.chunks = s.mb.member_chunks[me];
  std::vector<int> order(s.mb.sample_offsets.back());  // what key_order must give
  int next = 0;  // rank-major: member by member, each in its own row order
  for (int p = 0; p < members; ++p)
    for (const SequenceChunk& c : s.mb.member_chunks[p]) {
      const int first = s.mb.sample_offsets[c.sample];
      if (p == me) {
        s.gathered.add(static_cast<int>(s.local_to_global.size()), c.end - c.begin, first, lengths[c.sample],
                       c.begin);
        for (int row = c.begin; row < c.end; ++row) s.local_to_global.push_back(first + row);
      }
      for (int row = c.begin; row < c.end; ++row) order[first + row] = next++;
    }
  EXPECT_EQ(key_order(s.mb), order);
  return s;
}

t_mat random_matrix(int rows, int cols, std::uint64_t seed, const char* label) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const t_mat m(std::string(label), rows, cols);
  const auto h = Kokkos::create_mirror_view(m);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) h(r, c) = normal(rng);
  Kokkos::deep_copy(m, h);
  return m;
}

// The rows `rows` of m (on the host).
Kokkos::View<float**, Kokkos::HostSpace> pick(const t_mat& m, const std::vector<int>& rows) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), m);
  Kokkos::View<float**, Kokkos::HostSpace> out("picked", rows.size(), m.extent(1));
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t c = 0; c < m.extent(1); ++c) out(r, c) = h(rows[r], c);
  return out;
}

void expect_near_rows(const t_mat& got, const Kokkos::View<float**, Kokkos::HostSpace>& want, float tol,
                      const std::string& what) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), got);
  ASSERT_EQ(h.extent(0), want.extent(0)) << what;
  ASSERT_EQ(h.extent(1), want.extent(1)) << what;
  for (size_t r = 0; r < h.extent(0); ++r)
    for (size_t c = 0; c < h.extent(1); ++c)
      ASSERT_NEAR(h(r, c), want(r, c), tol * (1.0f + std::fabs(want(r, c))))
          << what << " row " << r << " col " << c << " on rank " << world_rank();
}

std::shared_ptr<Communicator> world_group() {
  std::vector<int> ranks(world_size());
  for (int r = 0; r < world_size(); ++r) ranks[r] = r;
  return create_mpi_communicator(MPI_COMM_WORLD, ranks);
}

class ContextAttentionModes : public testing::TestWithParam<CpComm> {};

TEST_P(ContextAttentionModes, GivesEveryMemberTheOnePassAttentionAndGradients) {
  const int members = world_size(), me = world_rank();
  // Long and short samples, one of 1 row and one of 2 (empty chunks from 2 ranks on).
  const std::vector<int> lengths = {37, 1, 64, 2, 23, 5};
  const Split s = split(lengths, members, me);
  const int total = s.mb.sample_offsets.back(), local = static_cast<int>(s.local_to_global.size());

  // The whole sequences on every rank: Q|K|V and the output's gradient, and one pass's results.
  const t_mat qkv_all = random_matrix(total, 3 * kWidth, 11, "qkv_all");
  const t_mat dout_all = random_matrix(total, kWidth, 12, "dout_all");
  const AttentionSegments whole = make_self_segments(lengths, true);
  const t_mat out_all("out_all", total, kWidth), lse_all("lse_all", total, kShape.heads);
  attention_forward(columns(qkv_all, 0, kWidth), columns(qkv_all, kWidth, kWidth),
                    columns(qkv_all, 2 * kWidth, kWidth), whole, kShape, out_all, lse_all);
  const t_mat dqkv_all("dqkv_all", total, 3 * kWidth);
  attention_backward(dout_all, columns(qkv_all, 0, kWidth), columns(qkv_all, kWidth, kWidth),
                     columns(qkv_all, 2 * kWidth, kWidth), out_all, lse_all, whole, kShape,
                     columns(dqkv_all, 0, kWidth), columns(dqkv_all, kWidth, kWidth),
                     columns(dqkv_all, 2 * kWidth, kWidth));

  // This rank's rows through the mechanism.
  Workspace workspace;
  const WorkspaceScope scope(workspace);
  const auto local_copy = [&](const t_mat& all, const char* label) {
    const auto rows = pick(all, s.local_to_global);
    const t_mat m(std::string(label), local, all.extent(1));
    Kokkos::deep_copy(m, rows);
    return m;
  };
  const t_mat qkv = local_copy(qkv_all, "qkv"), dout = local_copy(dout_all, "dout");
  const std::unique_ptr<ContextAttention> cp =
      make_context_attention(GetParam(), world_group(), s.mb, kShape);
  const ContextAttention::Kept kept = cp->kept_shape();
  const t_mat kv_full("kv_full", kept.rows, kept.cols), d_kv_full("d_kv_full", kept.rows, kept.cols);
  const AttentionSegments segs = make_segments(s.gathered, true);
  const t_mat attn("attn", local, kWidth), lse("lse", local, kShape.heads), dqkv("dqkv", local, 3 * kWidth);
  cp->forward(qkv, kv_full, segs, kShape, attn, lse);
  cp->backward(dout, qkv, kv_full, attn, lse, segs, kShape, dqkv, d_kv_full);

  expect_near_rows(attn, pick(out_all, s.local_to_global), 1e-5f, "attention output");
  expect_near_rows(lse, pick(lse_all, s.local_to_global), 1e-5f, "log-sum-exp");
  expect_near_rows(dqkv, pick(dqkv_all, s.local_to_global), 1e-4f, "dQ|dK|dV");

  // Selective recomputation gives the forward's values again.
  const t_mat attn2("attn2", local, kWidth), lse2("lse2", local, kShape.heads);
  cp->recompute(qkv, kv_full, segs, kShape, attn2, lse2);
  expect_near_rows(attn2, Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), attn), 0.0f,
                   "recomputed output");
  EXPECT_GE(cp->seconds(), 0.0);
}

INSTANTIATE_TEST_SUITE_P(EveryMechanism, ContextAttentionModes,
                         testing::Values(CpComm::p2p, CpComm::a2a, CpComm::all_gather),
                         [](const testing::TestParamInfo<CpComm>& info) {
                           return std::string(to_string(info.param));
                         });

// a2a keeps the head shard of the group's rows; a group whose size does not divide the heads runs the
// ring (cp_comm_for_group), which keeps nothing, and is as exact.
TEST(UlyssesAttention, GroupsNotDividingTheHeadsRunTheRing) {
  EXPECT_EQ(cp_comm_for_group(CpComm::a2a, 4, 8), CpComm::a2a);
  EXPECT_EQ(cp_comm_for_group(CpComm::a2a, 3, 8), CpComm::p2p);
  EXPECT_EQ(cp_comm_for_group(CpComm::a2a, 5, 5), CpComm::a2a);
  EXPECT_EQ(cp_comm_for_group(CpComm::all_gather, 3, 8), CpComm::all_gather);
  EXPECT_EQ(cp_comm_for_group(CpComm::p2p, 4, 8), CpComm::p2p);
  const int members = world_size(), me = world_rank();
  const Split s = split({19, 2, 30}, members, me);
  const AttentionShape odd{members == 1 ? 1 : members + 1, 4};  // divisible by 1 only
  const std::unique_ptr<ContextAttention> cp = make_context_attention(CpComm::a2a, world_group(), s.mb, odd);
  const ContextAttention::Kept kept = cp->kept_shape();
  if (members == 1) {
    EXPECT_EQ(kept.rows, s.mb.sample_offsets.back());
    EXPECT_EQ(kept.cols, 4 * odd.heads * odd.head_dim + odd.heads);
  } else {
    EXPECT_EQ(kept.rows, 0) << "the ring keeps nothing";
  }
}

// The 2 x cp chunks give every step of the ring the same causal work: at step t member r attends its
// queries against member (r - t) mod g's keys, and the query-key pairs it finds are the same for every r
// (up to the rounding of chunks to whole rows), steps 0 included.
TEST(LoadBalancedChunks, EveryRingStepHasTheSameCausalWork) {
  for (int tokens : {4096, 1001})
    for (int g : {2, 3, 4, 7}) {
      SCOPED_TRACE(std::to_string(tokens) + " tokens on " + std::to_string(g));
      const auto pairs = [&](int r, int p) {
        double n = 0.0;
        for (const RowRange& q : load_balanced_chunks(tokens, g, r))
          for (int x = q.begin; x < q.end; ++x)
            for (const RowRange& k : load_balanced_chunks(tokens, g, p))
              n += std::max(0, std::min(k.end, x + 1) - k.begin);
        return n;
      };
      const double chunk = static_cast<double>(tokens) / (2 * g), ideal = 2.0 * chunk * chunk;
      for (int t = 0; t < g; ++t)
        for (int r = 0; r < g; ++r)
          EXPECT_NEAR(pairs(r, (r - t + g) % g), ideal, 4.0 * chunk) << "step " << t << " member " << r;
    }
}

// The ring's gradients against finite differences of L = sum(attn * R) over the group, for a few
// elements of each member's Q, K and V (the ring itself, not compared with another implementation).
TEST(RingAttention, BackwardMatchesFiniteDifferences) {
  const int members = world_size(), me = world_rank();
  const std::vector<int> lengths = {9, 3, 14};
  const Split s = split(lengths, members, me);
  const int local = static_cast<int>(s.local_to_global.size());
  Workspace workspace;
  const WorkspaceScope scope(workspace);
  const t_mat qkv = random_matrix(local, 3 * kWidth, 100 + me, "qkv");
  const t_mat weights = random_matrix(local, kWidth, 200 + me, "weights");
  const std::unique_ptr<ContextAttention> ring =
      make_context_attention(CpComm::p2p, world_group(), s.mb, kShape);
  const t_mat none("none", 0, 0);
  const AttentionSegments unused = make_segments(s.gathered, true);
  const t_mat attn("attn", local, kWidth), lse("lse", local, kShape.heads), dqkv("dqkv", local, 3 * kWidth);
  const auto loss = [&] {
    ring->forward(qkv, none, unused, kShape, attn, lse);
    const auto a = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), attn);
    const auto w = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), weights);
    double sum = 0.0;
    for (int r = 0; r < local; ++r)
      for (int c = 0; c < kWidth; ++c) sum += static_cast<double>(a(r, c)) * w(r, c);
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum;
  };
  loss();
  ring->backward(weights, qkv, none, attn, lse, unused, kShape, dqkv, none);
  const auto grad = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dqkv);
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), qkv);
  constexpr float kStep = 1e-2f;
  // Every member takes its turn to perturb (the loss is a collective); one element of Q, K and V each.
  for (int owner = 0; owner < members; ++owner) {
    for (int block = 0; block < 3; ++block) {
      int row = 0, col = block * kWidth + 3;
      int has_row = owner == me && local > 0 ? 1 : 0;
      MPI_Bcast(&has_row, 1, MPI_INT, owner, MPI_COMM_WORLD);
      if (!has_row) continue;
      if (owner == me) row = local - 1;
      const auto nudge = [&](float delta) {
        if (owner == me) {
          host(row, col) += delta;
          Kokkos::deep_copy(qkv, host);
        }
      };
      nudge(kStep);
      const double up = loss();
      nudge(-2.0f * kStep);
      const double down = loss();
      nudge(kStep);
      if (owner == me) {
        EXPECT_NEAR((up - down) / (2.0 * kStep), grad(row, col), 2e-2 * (1.0 + std::fabs(grad(row, col))))
            << "element (" << row << ", " << col << ") of rank " << me;
      }
    }
  }
}

}  // namespace
}  // namespace minimllm
