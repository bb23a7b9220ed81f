// Variable-length attention against a naive masked reference in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "minimllm/kernels/attention.hpp"
#include "minimllm/kernels/gemm.hpp"

namespace minimllm {
namespace {

struct Case {
  std::vector<int> q_len, k_len, offset;  // per segment; keys and queries in separate packed rows
  bool causal;
  AttentionShape shape;
  std::vector<int> k_start = {};  // each segment's first key row; empty: packed one after another
  int first_key(size_t s, int packed) const { return k_start.empty() ? packed : k_start[s]; }
  int key_rows() const {
    int rows = 0, packed = 0;
    for (size_t s = 0; s < k_len.size(); ++s)
      rows = std::max(rows, first_key(s, packed) + k_len[s]), packed += k_len[s];
    return rows;
  }
};

struct HostTensors {
  std::vector<double> q, k, v, dout;  // row-major [rows, heads*head_dim]
};

t_mat to_device(const std::vector<double>& host, int rows, int cols) {
  t_mat m("m", rows, cols);
  auto h = Kokkos::create_mirror_view(m);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) h(r, c) = static_cast<float>(host[r * cols + c]);
  Kokkos::deep_copy(m, h);
  return m;
}

AttentionSegments segments_of(const Case& c) {
  SegmentTable table;
  int qrow = 0, krow = 0;
  for (size_t i = 0; i < c.q_len.size(); ++i) {
    table.add(qrow, c.q_len[i], c.first_key(i, krow), c.k_len[i], c.offset[i]);
    qrow += c.q_len[i], krow += c.k_len[i];
  }
  return make_segments(table, c.causal);
}

// Reference: explicit softmax over the visible keys, and its exact backward.
void reference(const Case& c, const HostTensors& t, std::vector<double>& out, std::vector<double>& dq,
               std::vector<double>& dk, std::vector<double>& dv) {
  const int H = c.shape.heads, D = c.shape.head_dim, W = H * D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  int q0 = 0, packed = 0;
  for (size_t s = 0; s < c.q_len.size(); ++s) {
    const int nq = c.q_len[s], nk = c.k_len[s], k0 = c.first_key(s, packed);
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < nq; ++i) {
        const int seen = c.causal ? std::max(0, std::min(nk, i + c.offset[s] + 1)) : nk;
        std::vector<double> p(seen), dp(seen);
        double mx = -1e300, sum = 0.0;
        for (int j = 0; j < seen; ++j) {
          double dot = 0.0;
          for (int d = 0; d < D; ++d) dot += t.q[(q0 + i) * W + h * D + d] * t.k[(k0 + j) * W + h * D + d];
          p[j] = dot * scale;
          mx = std::max(mx, p[j]);
        }
        for (int j = 0; j < seen; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (int j = 0; j < seen; ++j) p[j] /= sum;
        double delta = 0.0;
        for (int d = 0; d < D; ++d) {
          double o = 0.0;
          for (int j = 0; j < seen; ++j) o += p[j] * t.v[(k0 + j) * W + h * D + d];
          out[(q0 + i) * W + h * D + d] = o;
          delta += o * t.dout[(q0 + i) * W + h * D + d];
        }
        for (int j = 0; j < seen; ++j) {
          double g = 0.0;
          for (int d = 0; d < D; ++d) {
            g += t.dout[(q0 + i) * W + h * D + d] * t.v[(k0 + j) * W + h * D + d];
            dv[(k0 + j) * W + h * D + d] += p[j] * t.dout[(q0 + i) * W + h * D + d];
          }
          const double ds = p[j] * (g - delta) * scale;
          for (int d = 0; d < D; ++d) {
            dq[(q0 + i) * W + h * D + d] += ds * t.k[(k0 + j) * W + h * D + d];
            dk[(k0 + j) * W + h * D + d] += ds * t.q[(q0 + i) * W + h * D + d];
          }
        }
      }
    q0 += nq, packed += nk;
  }
}

void expect_close(const std::vector<double>& ref, const t_mat& got, const char* what) {
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), got);
  double max_ref = 1e-6;
  for (double r : ref) max_ref = std::max(max_ref, std::abs(r));
  const int cols = static_cast<int>(got.extent(1));
  for (size_t idx = 0; idx < ref.size(); ++idx) {
    const double g = h(idx / cols, idx % cols);
    // fp32 accumulation over at most a few hundred terms: 1e-5 of the tensor's scale.
    ASSERT_NEAR(g, ref[idx], 1e-5 * max_ref + 1e-6) << what << " element " << idx;
  }
}

void run_case(const Case& c) {
  const int W = c.shape.heads * c.shape.head_dim;
  int nq = 0;
  for (size_t s = 0; s < c.q_len.size(); ++s) nq += c.q_len[s];
  const int nk = c.key_rows();
  std::mt19937 gen(42);
  std::normal_distribution<double> normal(0.0, 1.0);
  HostTensors t;
  for (auto* vec : {&t.q, &t.dout}) vec->resize(static_cast<size_t>(nq) * W);
  for (auto* vec : {&t.k, &t.v}) vec->resize(static_cast<size_t>(nk) * W);
  for (auto* vec : {&t.q, &t.k, &t.v, &t.dout})
    for (double& x : *vec) x = normal(gen);
  std::vector<double> out(t.q.size()), dq(t.q.size()), dk(t.k.size()), dv(t.v.size());
  reference(c, t, out, dq, dk, dv);

  const auto segs = segments_of(c);
  t_mat q = to_device(t.q, nq, W), k = to_device(t.k, nk, W), v = to_device(t.v, nk, W);
  t_mat dout = to_device(t.dout, nq, W);
  // Both implementations on whatever backend runs: the host kernels and the team (GPU) kernels; the host
  // kernels both on BLAS block products (where blas_for_other_products) and on their own tiles (what
  // runtime.gemm: portable, or a generic OpenBLAS core, gets).
  struct Variant {
    AttentionKernels kernels;
    bool without_blas;
    const char* name;
  };
  for (const Variant& variant : {Variant{AttentionKernels::host, false, "host kernels"},
                                 Variant{AttentionKernels::host, true, "host kernels without BLAS"},
                                 Variant{AttentionKernels::teams, false, "team kernels"}}) {
    SCOPED_TRACE(variant.name);
    const AttentionKernels kernels = variant.kernels;
    const GemmSelectionScope selection(
        variant.without_blas ? GemmSelection{{GemmShapeClass{}, GemmBackend::portable}} : GemmSelection{});
    if (variant.without_blas) {
      EXPECT_FALSE(blas_for_other_products());
    }
    t_mat o("out", nq, W), lse("lse", nq, c.shape.heads), gq("dq", nq, W), gk("dk", nk, W), gv("dv", nk, W);
    attention_forward(q, k, v, segs, c.shape, o, lse, kernels);
    expect_close(out, o, "out");
    attention_backward(dout, q, k, v, o, lse, segs, c.shape, gq, gk, gv, kernels);
    expect_close(dq, gq, "dq");
    expect_close(dk, gk, "dk");
    expect_close(dv, gv, "dv");
  }
}

Case self_case(std::vector<int> lengths, bool causal, AttentionShape shape) {
  return {lengths, lengths, std::vector<int>(lengths.size(), 0), causal, shape};
}

TEST(Attention, CausalPackedSamplesOddLengths) { run_case(self_case({1, 7, 33, 64, 100}, true, {2, 16})); }
TEST(Attention, SingleTokenSequence) { run_case(self_case({1}, true, {1, 64})); }
TEST(Attention, BidirectionalPerImage) { run_case(self_case({16, 4, 9, 37}, false, {3, 32})); }
TEST(Attention, HeadDimNotPowerOfTwo) { run_case(self_case({5, 40}, true, {2, 24})); }
TEST(Attention, HeadDim64LongerSequence) { run_case(self_case({130}, true, {2, 64})); }
TEST(Attention, HeadDim128) { run_case(self_case({45}, true, {1, 128})); }
// A query chunk placed inside a longer key sequence, as context parallelism needs.
TEST(Attention, CausalOffsetChunks) { run_case({{10, 33, 5}, {40, 70, 5}, {30, 37, 0}, true, {2, 16}}); }
// Query chunks sharing key rows, as context parallelism's 2 x cp chunks make them (an early and a late
// chunk of one sequence against its keys): the backward sums every chunk's share into the shared rows.
TEST(Attention, ChunksSharingKeyRows) {
  Case c{{12, 12, 7, 40}, {24, 70, 30, 30}, {12, 58, 30, 30}, true, {2, 16}, {0, 0, 70, 70}};
  ASSERT_EQ(segments_of(c).backward_passes.size(), 2u);
  run_case(c);
  c.k_start.clear();  // disjoint keys: one pass
  EXPECT_TRUE(segments_of(c).backward_passes.empty());
}

TEST(Attention, FlopsCountVisiblePairs) {
  const AttentionShape shape{2, 8};
  EXPECT_DOUBLE_EQ(attention_forward_flops({3}, true, shape), 4.0 * 6 * 8 * 2);
  EXPECT_DOUBLE_EQ(attention_forward_flops({3, 2}, false, shape), 4.0 * 13 * 8 * 2);
}

TEST(Attention, RejectsHeadDimAboveLimit) {
  t_mat q("q", 2, 256);
  t_mat out("out", 2, 256), lse("lse", 2, 1);
  EXPECT_THROW(attention_forward(q, q, q, make_self_segments({2}, true), {1, 256}, out, lse),
               std::invalid_argument);
}

}  // namespace
}  // namespace minimllm
