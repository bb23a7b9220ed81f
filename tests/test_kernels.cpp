// Kernel tests: GEMM against a double-precision reference, backward passes against central differences of
// the fp32 forward kernels, AdamW against a scalar reference, and run-to-run bitwise determinism.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "minimllm/kernels/activation.hpp"
#include "minimllm/kernels/bf16.hpp"
#include "minimllm/kernels/embedding.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/loss.hpp"
#include "minimllm/kernels/norm.hpp"
#include "minimllm/kernels/optimizer.hpp"

namespace minimllm {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <class View>
auto to_host(const View& v) {
  return Kokkos::create_mirror_view_and_copy(HostSpace(), v);
}

t_mat random_matrix(int rows, int cols, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  t_mat m("random_matrix", rows, cols);
  auto host = Kokkos::create_mirror_view(m);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) host(i, j) = dist(gen);
  Kokkos::deep_copy(m, host);
  return m;
}

t_vec random_vector(int n, unsigned seed, float lo = -1.0f, float hi = 1.0f) {
  t_vec v("random_vector", n);
  auto host = Kokkos::create_mirror_view(v);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int i = 0; i < n; ++i) host(i) = dist(gen);
  Kokkos::deep_copy(v, host);
  return v;
}

t_ivec int_vector(const std::vector<int>& values) {
  t_ivec v("int_vector", values.size());
  auto host = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < values.size(); ++i) host(i) = values[i];
  Kokkos::deep_copy(v, host);
  return v;
}

template <class View>
View copy_of(const View& v) {
  View copy(std::string(v.label()) + "_copy", v.layout());
  Kokkos::deep_copy(copy, v);
  return copy;
}

// Every element in storage order (the views here are contiguous).
template <class View>
std::vector<double> elements(const View& v) {
  const auto host = to_host(v);
  return std::vector<double>(host.data(), host.data() + host.span());
}

template <class View>
bool bitwise_equal(const View& a, const View& b) {
  const auto ha = to_host(a);
  const auto hb = to_host(b);
  return ha.span() == hb.span() &&
         std::memcmp(ha.data(), hb.data(), ha.span() * sizeof(typename View::value_type)) == 0;
}

// sum(weights * y) in double: the scalar objective every gradient check differentiates.
double weighted_sum(const t_mat& y, const t_mat& weights) {
  const auto yh = elements(y);
  const auto wh = elements(weights);
  double total = 0.0;
  for (std::size_t i = 0; i < yh.size(); ++i) total += wh[i] * yh[i];
  return total;
}

// Central differences of objective() with respect to each element of input (a contiguous device view).
// The denominator is the step actually taken after rounding to fp32.
template <class View>
std::vector<double> central_differences(const View& input, const std::function<double()>& objective,
                                        float step = 1e-2f) {
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), input);
  std::vector<double> grad(host.span());
  for (std::size_t i = 0; i < host.span(); ++i) {
    const float saved = host.data()[i];
    const float plus = saved + step;
    const float minus = saved - step;
    host.data()[i] = plus;
    Kokkos::deep_copy(input, host);
    const double f_plus = objective();
    host.data()[i] = minus;
    Kokkos::deep_copy(input, host);
    const double f_minus = objective();
    host.data()[i] = saved;
    Kokkos::deep_copy(input, host);
    grad[i] = (f_plus - f_minus) / (double(plus) - double(minus));
  }
  return grad;
}

// after - before, element-wise: what an accumulating backward kernel added.
std::vector<double> added(const std::vector<double>& before, const std::vector<double>& after) {
  std::vector<double> diff(after.size());
  for (std::size_t i = 0; i < after.size(); ++i) diff[i] = after[i] - before[i];
  return diff;
}

// fp32 forward values differenced over a 2e-2 step leave ~1e-5 rounding noise and ~1e-5 truncation error.
void expect_gradients_near(const std::vector<double>& analytic, const std::vector<double>& numeric,
                           const char* what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  for (std::size_t i = 0; i < analytic.size(); ++i)
    EXPECT_NEAR(analytic[i], numeric[i], 1e-3 + 1e-3 * std::abs(numeric[i])) << what << " element " << i;
}

// ---------------------------------------------------------------------------------------------- gemm

#ifdef KOKKOS_ENABLE_CUDA
constexpr bool kCudaExec = std::is_same<ExecSpace, Kokkos::Cuda>::value;
#else
constexpr bool kCudaExec = false;
#endif

std::vector<GemmBackend> backends() {
  std::vector<GemmBackend> list{GemmBackend::portable};
  if (kMemSpaceIsHostAccessible) list.push_back(GemmBackend::blas);
  if (kCudaExec) list.push_back(GemmBackend::cublas);
  return list;
}

// A rows x cols view with a row stride wider than cols and a non-zero offset, inside a parent filled with
// `border`; the border must survive every kernel call.
struct StridedMatrix {
  t_mat parent;
  t_mat view;
  static constexpr int kRowOffset = 1, kColOffset = 2, kExtraCols = 5;

  StridedMatrix(int rows, int cols, unsigned seed, float border)
      : parent("strided_parent", rows + 2 * kRowOffset, cols + kExtraCols),
        view(Kokkos::subview(parent, std::make_pair(kRowOffset, kRowOffset + rows),
                             std::make_pair(kColOffset, kColOffset + cols))) {
    auto host = Kokkos::create_mirror_view(parent);
    Kokkos::deep_copy(host, border);
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int i = 0; i < rows; ++i)
      for (int j = 0; j < cols; ++j) host(kRowOffset + i, kColOffset + j) = dist(gen);
    Kokkos::deep_copy(parent, host);
  }

  void fill(float value) const {
    auto host = to_host(parent);
    for (std::size_t i = 0; i < view.extent(0); ++i)
      for (std::size_t j = 0; j < view.extent(1); ++j) host(kRowOffset + i, kColOffset + j) = value;
    Kokkos::deep_copy(parent, host);
  }

  bool border_is(float border) const {
    const auto host = to_host(parent);
    for (std::size_t i = 0; i < parent.extent(0); ++i)
      for (std::size_t j = 0; j < parent.extent(1); ++j) {
        const bool inside = i >= std::size_t(kRowOffset) && i < kRowOffset + view.extent(0) &&
                            j >= std::size_t(kColOffset) && j < kColOffset + view.extent(1);
        if (!inside && host(i, j) != border) return false;
      }
    return true;
  }
};

void check_gemm(GemmBackend backend, Trans trans_a, Trans trans_b, int m, int n, int k, float beta) {
  SCOPED_TRACE(std::string(to_string(backend)) + " trans_a=" + std::to_string(trans_a == Trans::yes) +
               " trans_b=" + std::to_string(trans_b == Trans::yes) + " m=" + std::to_string(m) +
               " n=" + std::to_string(n) + " k=" + std::to_string(k) + " beta=" + std::to_string(beta));
  const bool ta = trans_a == Trans::yes;
  const bool tb = trans_b == Trans::yes;
  const float border = 12345.0f;
  const StridedMatrix a(ta ? k : m, ta ? m : k, 11, border);
  const StridedMatrix b(tb ? n : k, tb ? k : n, 12, border);
  const StridedMatrix c(m, n, 13, border);
  if (beta == 0.0f) c.fill(kNaN);  // beta == 0 must not read C
  const auto ah = to_host(a.view);
  const auto bh = to_host(b.view);
  const auto c0 = Kokkos::create_mirror_view_and_copy(HostSpace(), c.view);
  const auto c_before = t_mat_host("c_before", m, n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) c_before(i, j) = c0(i, j);  // c0 may alias the device view on host backends

  const float alpha = 0.75f;
  gemm(trans_a, trans_b, alpha, a.view, b.view, beta, c.view, backend);

  const auto ch = to_host(c.view);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double dot = 0.0, magnitude = 0.0;
      for (int p = 0; p < k; ++p) {
        const double product = double(ta ? ah(p, i) : ah(i, p)) * double(tb ? bh(j, p) : bh(p, j));
        dot += product;
        magnitude += std::abs(product);
      }
      double expected = alpha * dot;
      double scale = std::abs(alpha) * magnitude;
      if (beta != 0.0f) {
        expected += beta * double(c_before(i, j));
        scale += std::abs(beta * double(c_before(i, j)));
      }
      // fp32 rounding of a k-term sum grows like sqrt(k) * 2^-24 relative to the sum of magnitudes.
      const double tolerance = 1e-5 * std::sqrt(double(k) + 1.0) * scale + 1e-30;
      ASSERT_NEAR(ch(i, j), expected, tolerance) << "C(" << i << ", " << j << ")";
    }
  }
  EXPECT_TRUE(c.border_is(border)) << "gemm wrote outside C";
  EXPECT_TRUE(a.border_is(border) && b.border_is(border)) << "gemm wrote to A or B";
}

TEST(Gemm, MatchesDoubleReferenceForAllTransposesStridesAndBetas) {
  // Odd sizes below one tile, and sizes spanning several tiles in M, N and K (including a partial K chunk):
  // {200, 300, 530} crosses the host kernel's 192 x 256 C tiles, its 12 x 32 register blocks and 256-deep
  // K chunks, each with a partial remainder.
  const std::vector<std::array<int, 3>> shapes{{7, 13, 5},     {33, 65, 17}, {1, 1, 1},
                                               {130, 67, 300}, {5, 4, 0},    {200, 300, 530}};
  for (const GemmBackend backend : backends())
    for (const Trans trans_a : {Trans::no, Trans::yes})
      for (const Trans trans_b : {Trans::no, Trans::yes})
        for (const auto& [m, n, k] : shapes)
          for (const float beta : {0.0f, 1.0f, -0.5f}) check_gemm(backend, trans_a, trans_b, m, n, k, beta);
}

TEST(Gemm, RejectsNonConformingShapesNamingThem) {
  const t_mat a("a", 3, 4), b("b", 5, 6), c("c", 3, 6);
  for (const GemmBackend backend : backends()) {
    try {
      gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c, backend);
      ADD_FAILURE() << "no exception for " << to_string(backend);
    } catch (const std::invalid_argument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("3x4"), std::string::npos) << message;
      EXPECT_NE(message.find("5x6"), std::string::npos) << message;
      EXPECT_NE(message.find("3x6"), std::string::npos) << message;
    }
  }
  // op(B) = B^T is 6x5: K still disagrees; C with the wrong row count fails too.
  EXPECT_THROW(gemm(Trans::no, Trans::yes, 1.0f, a, b, 0.0f, c, GemmBackend::portable),
               std::invalid_argument);
  EXPECT_THROW(
      gemm(Trans::no, Trans::no, 1.0f, a, t_mat("b2", 4, 6), 0.0f, t_mat("c2", 2, 6), GemmBackend::portable),
      std::invalid_argument);
}

TEST(Gemm, DefaultBackendFollowsMemorySpace) {
  const GemmBackend expected = kCudaExec                   ? GemmBackend::cublas
                               : kMemSpaceIsHostAccessible ? GemmBackend::blas
                                                           : GemmBackend::portable;
  EXPECT_EQ(default_gemm_backend(), expected);
  const t_mat a("a", 2, 2);
  if (!kMemSpaceIsHostAccessible) {
    EXPECT_THROW(gemm(Trans::no, Trans::no, 1.0f, a, a, 0.0f, a, GemmBackend::blas), std::invalid_argument);
  }
  if (!kCudaExec) {
    EXPECT_THROW(gemm(Trans::no, Trans::no, 1.0f, a, a, 0.0f, a, GemmBackend::cublas), std::invalid_argument);
  }
  EXPECT_STREQ(to_string(GemmBackend::blas), "blas");
  EXPECT_STREQ(to_string(GemmBackend::portable), "portable");
  EXPECT_STREQ(to_string(GemmBackend::cublas), "cublas");
}

// ------------------------------------------------------------------------------------------ bf16 gemm

float from_bits(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits(-2.0f), 0xc000);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even significand (1).
  EXPECT_EQ(bf16_round(1.0f + 0x1p-8f), 1.0f);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(bf16_round(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  // Just above a tie rounds up, just below rounds down.
  EXPECT_EQ(bf16_round(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(bf16_round(1.0f + 0x1p-8f - 0x1p-20f), 1.0f);
  EXPECT_EQ(bf16_round(-(1.0f + 3 * 0x1p-8f)), -(1.0f + 0x1p-6f));
  // A carry out of the significand moves to the next binade.
  EXPECT_EQ(bf16_round(from_bits(0x3fffffff)), 2.0f);
  // Overflow to infinity; infinities and NaN stay what they are.
  EXPECT_EQ(bf16_round(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(bf16_round(-std::numeric_limits<float>::infinity()), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bf16_round(kNaN)));
  EXPECT_TRUE(std::isnan(bf16_round(from_bits(0x7f800001))));  // a NaN whose payload rounding would lose
  // Subnormals: bf16 keeps 7 fraction bits of them, like of normal numbers.
  EXPECT_EQ(bf16_round(0x1p-133f), 0x1p-133f);
  EXPECT_EQ(bf16_round(0x1p-149f), 0.0f);
  EXPECT_EQ(bf16_round(-0.0f), -0.0f);
  EXPECT_TRUE(std::signbit(bf16_round(-0.0f)));
}

// Device and host round alike (the kernel is what the GEMMs run).
Kokkos::View<float*, MemSpace> round_on_device(const std::vector<float>& values) {
  Kokkos::View<float*, MemSpace> v("bf16_values", values.size());
  auto host = Kokkos::create_mirror_view(v);
  for (std::size_t i = 0; i < values.size(); ++i) host(i) = values[i];
  Kokkos::deep_copy(v, host);
  Kokkos::parallel_for(
      "test::bf16_round", Kokkos::RangePolicy<ExecSpace>(0, static_cast<int>(values.size())),
      KOKKOS_LAMBDA(const int i) { v(i) = bf16_round(v(i)); });
  return v;
}

TEST(Bf16, DeviceRoundingMatchesHost) {
  std::mt19937 gen(5);
  std::uniform_int_distribution<std::uint32_t> bits;
  std::vector<float> values;
  for (int i = 0; i < 4096; ++i) {
    const float x = from_bits(bits(gen));
    if (!std::isnan(x)) values.push_back(x);
  }
  const auto rounded = to_host(round_on_device(values));
  int wrong = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const float expected = bf16_round(values[i]);
    wrong += std::memcmp(&expected, &rounded(i), sizeof expected) != 0;
  }
  EXPECT_EQ(wrong, 0);
}

// C = alpha op(A) op(B) + beta C with bf16 inputs: checked (1) against the exact product of the rounded
// operands (the semantics: only the inputs are rounded), and (2) against the exact product of the
// unrounded ones (what bf16 costs). Returns, for (2), the RMS error over C divided by
// 2^-8 sqrt(k) rms(A) rms(B). For operands spread evenly over their binades the rounding error of x in
// [2^e, 2^e+1) is uniform in +-2^(e-8), so E[err^2] / E[x^2] = (2^-16 / 3) / (7/3) = 2^-16 / 7 per
// operand; a product carries two, so the ratio is about sqrt(2/7) = 0.53.
double check_gemm_bf16(GemmBackend backend, Trans trans_a, Trans trans_b, int m, int n, int k, float beta) {
  SCOPED_TRACE(std::string("bf16 ") + to_string(backend) +
               " trans_a=" + std::to_string(trans_a == Trans::yes) +
               " trans_b=" + std::to_string(trans_b == Trans::yes) + " m=" + std::to_string(m) +
               " n=" + std::to_string(n) + " k=" + std::to_string(k) + " beta=" + std::to_string(beta));
  const bool ta = trans_a == Trans::yes, tb = trans_b == Trans::yes;
  const float border = 12345.0f, alpha = 0.75f;
  const StridedMatrix a(ta ? k : m, ta ? m : k, 21, border);
  const StridedMatrix b(tb ? n : k, tb ? k : n, 22, border);
  const StridedMatrix c(m, n, 23, border);
  if (beta == 0.0f) c.fill(kNaN);
  const auto ah = to_host(a.view);
  const auto bh = to_host(b.view);
  const auto c0 = to_host(c.view);
  std::vector<double> c_before(static_cast<std::size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) c_before[i * n + j] = c0(i, j);

  gemm(trans_a, trans_b, alpha, a.view, b.view, beta, c.view, backend, GemmPrecision::bf16);

  const auto ch = to_host(c.view);
  double err2 = 0.0, a2 = 0.0, b2 = 0.0;
  for (std::size_t i = 0; i < ah.extent(0); ++i)
    for (std::size_t j = 0; j < ah.extent(1); ++j) a2 += double(ah(i, j)) * ah(i, j);
  for (std::size_t i = 0; i < bh.extent(0); ++i)
    for (std::size_t j = 0; j < bh.extent(1); ++j) b2 += double(bh(i, j)) * bh(i, j);
  // cuBLAS's tensor cores accumulate in fp32 in their own order (not yet measured on a GPU here).
  const double accumulation = backend == GemmBackend::cublas ? 8e-5 : 1e-5;
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      double rounded_dot = 0.0, exact_dot = 0.0, magnitude = 0.0;
      for (int p = 0; p < k; ++p) {
        const float x = ta ? ah(p, i) : ah(i, p), y = tb ? bh(j, p) : bh(p, j);
        rounded_dot += double(bf16_round(x)) * double(bf16_round(y));
        exact_dot += double(x) * double(y);
        magnitude += std::abs(double(x) * double(y));
      }
      const double c_term = beta != 0.0f ? beta * c_before[i * n + j] : 0.0;
      const double expected = alpha * rounded_dot + c_term;
      const double scale = std::abs(alpha) * magnitude + std::abs(c_term);
      const double accumulated = accumulation * std::sqrt(double(k) + 1.0) * scale + 1e-30;
      const double error = ch(i, j) - (alpha * exact_dot + c_term);
      err2 += (error / alpha) * (error / alpha);
      if (std::abs(ch(i, j) - expected) > accumulated) {
        ADD_FAILURE() << "C(" << i << ", " << j << ") = " << ch(i, j) << " is not the product of the "
                      << "bf16-rounded operands, " << expected << " (tolerance " << accumulated << ")";
        return 0.0;
      }
      // Worst case of the rounding: each product is off by at most (1 + 2^-8)^2 - 1 < 2^-7 + 2^-16.
      const double bound = (0x1p-7 + 0x1p-16) * std::abs(alpha) * magnitude + accumulated;
      if (std::abs(error) > bound) {
        ADD_FAILURE() << "C(" << i << ", " << j << ") is off by " << error << ", beyond the bf16 bound "
                      << bound;
        return 0.0;
      }
    }
  }
  EXPECT_TRUE(c.border_is(border)) << "gemm wrote outside C";
  EXPECT_TRUE(a.border_is(border) && b.border_is(border)) << "gemm wrote to A or B";
  const double rms_a = std::sqrt(a2 / (double(m) * k)), rms_b = std::sqrt(b2 / (double(k) * n));
  return std::sqrt(err2 / (double(m) * n)) / (0x1p-8 * std::sqrt(double(k)) * rms_a * rms_b);
}

TEST(Gemm, Bf16InputsWithFp32AccumulationOnEveryBackend) {
  const std::vector<std::array<int, 3>> shapes{{7, 13, 5}, {33, 65, 17}, {130, 67, 300}, {64, 64, 1024}};
  for (const GemmBackend backend : backends()) {
    for (const Trans trans_a : {Trans::no, Trans::yes})
      for (const Trans trans_b : {Trans::no, Trans::yes})
        for (const auto& [m, n, k] : shapes)
          for (const float beta : {0.0f, -0.5f}) {
            const double ratio = check_gemm_bf16(backend, trans_a, trans_b, m, n, k, beta);
            if (m * n >= 1000 && trans_a == Trans::no && trans_b == Trans::no && beta == 0.0f) {
              std::printf("bf16 %s %dx%dx%d: RMS error / (2^-8 sqrt(k) rms(A) rms(B)) = %.3f\n",
                          to_string(backend), m, n, k, ratio);
            }
            // The typical error is 2^-8 sqrt(k) rms(A) rms(B) times sqrt(2/7) = 0.53 (measured
            // 0.530-0.536 here on the larger shapes, blas and portable alike): at 1 the rounding would be
            // twice as coarse as bf16's, and far below 0.53 the operands were not rounded at all (fp32
            // gives ~1e-5).
            if (m * n >= 1000) {
              EXPECT_LT(ratio, 1.0) << to_string(backend) << " m=" << m << " n=" << n << " k=" << k;
              EXPECT_GT(ratio, 0.35) << to_string(backend) << " m=" << m << " n=" << n << " k=" << k;
            }
          }
  }
}

TEST(Gemm, PrecisionNames) {
  EXPECT_STREQ(to_string(GemmPrecision::fp32), "fp32");
  EXPECT_STREQ(to_string(GemmPrecision::bf16), "bf16");
  EXPECT_EQ(gemm_precision_from_string("bf16"), GemmPrecision::bf16);
  EXPECT_EQ(gemm_precision_from_string("fp32"), GemmPrecision::fp32);
  EXPECT_THROW(gemm_precision_from_string("fp16"), std::invalid_argument);
}

// ------------------------------------------------------------------------------------------- rmsnorm

TEST(RmsNorm, ForwardMatchesReference) {
  const int rows = 5, cols = 16;
  const t_mat x = random_matrix(rows, cols, 1, -2.0f, 2.0f);
  const t_vec weight = random_vector(cols, 2, 0.5f, 1.5f);
  const t_mat y("y", rows, cols);
  const t_vec rstd("rstd", rows);
  rmsnorm_forward(x, weight, y, rstd);
  const auto xh = to_host(x);
  const auto wh = to_host(weight);
  const auto yh = to_host(y);
  const auto rh = to_host(rstd);
  for (int i = 0; i < rows; ++i) {
    double sum_sq = 0.0;
    for (int j = 0; j < cols; ++j) sum_sq += double(xh(i, j)) * xh(i, j);
    const double expected_rstd = 1.0 / std::sqrt(sum_sq / cols + kRmsNormEps);
    EXPECT_NEAR(rh(i), expected_rstd, 1e-5 * expected_rstd);
    for (int j = 0; j < cols; ++j) EXPECT_NEAR(yh(i, j), xh(i, j) * expected_rstd * wh(j), 1e-5);
  }
}

TEST(RmsNorm, BackwardAccumulatesFiniteDifferenceGradients) {
  const int rows = 5, cols = 16;
  const t_mat x = random_matrix(rows, cols, 1, -2.0f, 2.0f);
  const t_vec weight = random_vector(cols, 2, 0.5f, 1.5f);
  const t_mat w_out = random_matrix(rows, cols, 3);
  const t_mat y("y", rows, cols);
  const t_vec rstd("rstd", rows);
  const auto objective = [&]() {
    rmsnorm_forward(x, weight, y, rstd);
    return weighted_sum(y, w_out);
  };
  const auto numeric_dx = central_differences(x, objective);
  const auto numeric_dweight = central_differences(weight, objective);

  // Non-zero starting gradients: backward must add to them.
  const t_mat dx = random_matrix(rows, cols, 4);
  const t_vec dweight = random_vector(cols, 5);
  const auto dx_before = elements(dx);
  const auto dweight_before = elements(dweight);
  rmsnorm_forward(x, weight, y, rstd);
  rmsnorm_backward(w_out, x, weight, rstd, dx, dweight);
  expect_gradients_near(added(dx_before, elements(dx)), numeric_dx, "dx");
  expect_gradients_near(added(dweight_before, elements(dweight)), numeric_dweight, "dweight");
}

// ---------------------------------------------------------------------------------------------- gelu

TEST(Gelu, ForwardMatchesTanhApproximation) {
  const t_mat x = random_matrix(4, 9, 6, -4.0f, 4.0f);
  const t_mat y("y", 4, 9);
  gelu_forward(x, y);
  const auto xv = elements(x);
  const auto yv = elements(y);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    const double expected =
        0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / std::acos(-1.0)) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(yv[i], expected, 1e-6 * (1.0 + std::abs(expected))) << "x = " << v;
  }
}

TEST(Gelu, WholeVectorBlocksAndExtremeInputsMatchTheFormula) {
  // 37 columns: two 16-wide host blocks and a tail; inputs out to +-40 (the exp's clamped range).
  const t_mat x = random_matrix(3, 37, 12, -40.0f, 40.0f);
  const t_mat y("y", 3, 37), dx("dx", 3, 37);
  const t_mat ones("ones", 3, 37);
  Kokkos::deep_copy(ones, 1.0f);
  gelu_forward(x, y);
  gelu_backward(ones, x, dx);
  const auto xv = elements(x), yv = elements(y), dv = elements(dx);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i], k = std::sqrt(2.0 / std::acos(-1.0));
    const double t = std::tanh(k * (v + 0.044715 * v * v * v));
    const double expected = 0.5 * v * (1.0 + t);
    const double slope = 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * v * v);
    EXPECT_NEAR(yv[i], expected, 1e-6 * (1.0 + std::abs(expected))) << "x = " << v;
    EXPECT_NEAR(dv[i], slope, 1e-6 * (1.0 + std::abs(slope))) << "x = " << v;
  }
}

TEST(Gelu, BackwardMatchesFiniteDifferencesAndMayAliasDy) {
  const int rows = 4, cols = 9;
  const t_mat x = random_matrix(rows, cols, 6, -4.0f, 4.0f);
  const t_mat w_out = random_matrix(rows, cols, 7);
  const t_mat y("y", rows, cols);
  const auto numeric = central_differences(x, [&]() {
    gelu_forward(x, y);
    return weighted_sum(y, w_out);
  });
  const t_mat dx("dx", rows, cols);
  Kokkos::deep_copy(dx, kNaN);  // overwritten, not accumulated
  gelu_backward(w_out, x, dx);
  expect_gradients_near(elements(dx), numeric, "dx");

  const t_mat in_place = copy_of(w_out);
  gelu_backward(in_place, x, in_place);
  EXPECT_TRUE(bitwise_equal(in_place, dx));
}

// ------------------------------------------------------------------------------------------- softmax

TEST(SoftmaxXent, LossesMatchReferenceAndIgnoredRowsAreZero) {
  const int rows = 6, cols = 11;
  const t_mat logits = random_matrix(rows, cols, 8, -3.0f, 3.0f);
  const std::vector<int> target_list{3, -1, 0, 10, -1, 5};
  const t_ivec targets = int_vector(target_list);
  const t_vec losses("losses", rows);
  const t_mat dlogits("dlogits", rows, cols);
  Kokkos::deep_copy(losses, kNaN);
  Kokkos::deep_copy(dlogits, kNaN);
  softmax_xent_forward_backward(logits, targets, 0.37f, losses, dlogits);
  const auto lh = to_host(logits);
  const auto loss_h = to_host(losses);
  const auto dh = to_host(dlogits);
  for (int i = 0; i < rows; ++i) {
    if (target_list[i] < 0) {
      EXPECT_EQ(loss_h(i), 0.0f);
      for (int j = 0; j < cols; ++j) EXPECT_EQ(dh(i, j), 0.0f);
      continue;
    }
    double sum_exp = 0.0;
    for (int j = 0; j < cols; ++j) sum_exp += std::exp(double(lh(i, j)));
    EXPECT_NEAR(loss_h(i), std::log(sum_exp) - lh(i, target_list[i]), 1e-5);
  }
}

TEST(SoftmaxXent, GradientMatchesFiniteDifferencesAndWorksInPlace) {
  const int rows = 6, cols = 11;
  const float grad_scale = 0.37f;
  const t_mat logits = random_matrix(rows, cols, 8, -3.0f, 3.0f);
  const t_ivec targets = int_vector({3, -1, 0, 10, -1, 5});
  const t_vec losses("losses", rows);
  const t_mat scratch("scratch", rows, cols);
  // dlogits = grad_scale * d(sum losses)/dlogits.
  const auto numeric = central_differences(logits, [&]() {
    softmax_xent_forward_backward(logits, targets, grad_scale, losses, scratch);
    return grad_scale * sum(losses);
  });
  const t_mat dlogits("dlogits", rows, cols);
  softmax_xent_forward_backward(logits, targets, grad_scale, losses, dlogits);
  expect_gradients_near(elements(dlogits), numeric, "dlogits");

  const t_mat in_place = copy_of(logits);
  const t_vec losses_in_place("losses_in_place", rows);
  softmax_xent_forward_backward(in_place, targets, grad_scale, losses_in_place, in_place);
  EXPECT_TRUE(bitwise_equal(in_place, dlogits));
  EXPECT_TRUE(bitwise_equal(losses_in_place, losses));
}

// The fused LM head + loss in row chunks (uneven: 5 chunks of 60 for 300 rows at chunk_rows 64) against
// the unfused reference: the whole [rows, vocab] logits, softmax_xent in place, then the two GEMMs.
void expect_near_elementwise(const std::vector<double>& got, const std::vector<double>& want, double tol,
                             const char* name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0 + std::abs(want[i]))) << name << " element " << i;
}

TEST(LmHeadXent, ChunkedMatchesUnfusedReference) {
  const int rows = 300, width = 24, vocab = 50;
  const float grad_scale = 0.25f;
  const t_mat normed = random_matrix(rows, width, 41);
  const t_mat lm_head = random_matrix(width, vocab, 42);
  std::vector<int> target_list(rows);
  for (int i = 0; i < rows; ++i) target_list[i] = i % 7 == 3 ? -1 : (i * 13) % vocab;
  const t_ivec targets = int_vector(target_list);

  const t_mat logits("logits", rows, vocab);
  gemm(Trans::no, Trans::no, 1.0f, normed, lm_head, 0.0f, logits);
  const t_vec ref_losses("ref_losses", rows);
  softmax_xent_forward_backward(logits, targets, grad_scale, ref_losses, logits);
  const t_mat ref_dw = random_matrix(width, vocab, 43);  // accumulated into
  const t_mat dw = copy_of(ref_dw);
  gemm(Trans::yes, Trans::no, 1.0f, normed, logits, 1.0f, ref_dw);
  const t_mat ref_dx("ref_dx", rows, width);
  gemm(Trans::no, Trans::yes, 1.0f, logits, lm_head, 0.0f, ref_dx);

  for (int chunk_rows : {64, 1000}) {
    SCOPED_TRACE("chunk_rows=" + std::to_string(chunk_rows));
    const t_vec losses("losses", rows);
    const t_mat dx = random_matrix(rows, width, 44);  // overwritten
    const t_mat dw_chunked = copy_of(dw);
    lm_head_xent_forward_backward(normed, lm_head, targets, grad_scale, losses, dw_chunked, dx,
                                  GemmPrecision::fp32, chunk_rows);
    expect_near_elementwise(elements(losses), elements(ref_losses), 1e-6, "losses");
    expect_near_elementwise(elements(dx), elements(ref_dx), 1e-6, "d_normed");
    expect_near_elementwise(elements(dw_chunked), elements(ref_dw), 1e-5, "d_lm_head");
  }
}

TEST(LmHeadXent, ChunkRowsDependOnVocabularyOnly) {
  EXPECT_EQ(lm_head_chunk_rows(64), (1 << 23) / 64);
  EXPECT_EQ(lm_head_chunk_rows(50257), 256);  // at least 256 rows
  EXPECT_THROW(lm_head_chunk_rows(0), std::invalid_argument);
}

// ------------------------------------------------------------------------------------ row routing

TEST(Embedding, ForwardGathersRowsAndBackwardAccumulatesRepeatedIds) {
  const int vocab = 7, cols = 10;
  const std::vector<int> id_list{3, 1, 3, 3, 6, 0};
  const std::vector<int> row_list{5, 0, 2, 1, 4, 3};
  const t_ivec ids = int_vector(id_list);
  const t_ivec rows = int_vector(row_list);
  const t_mat table = random_matrix(vocab, cols, 9);
  const t_mat out("out", 6, cols);
  embedding_forward(ids, rows, table, out);
  const auto th = to_host(table);
  const auto oh = to_host(out);
  for (std::size_t i = 0; i < id_list.size(); ++i)
    for (int j = 0; j < cols; ++j) EXPECT_EQ(oh(row_list[i], j), th(id_list[i], j));

  const t_mat w_out = random_matrix(6, cols, 10);
  const auto numeric = central_differences(table, [&]() {
    embedding_forward(ids, rows, table, out);
    return weighted_sum(out, w_out);
  });
  const t_mat dtable = random_matrix(vocab, cols, 11);
  const auto before = elements(dtable);
  embedding_backward(ids, rows, w_out, dtable);
  const auto grad = added(before, elements(dtable));
  expect_gradients_near(grad, numeric, "dtable");
  // Ids 2, 4 and 5 are never used: their rows must be left exactly as they were.
  for (const int unused : {2, 4, 5})
    for (int j = 0; j < cols; ++j) EXPECT_EQ(grad[unused * cols + j], 0.0);
}

TEST(CopyRows, CopiesNamedRowsAndReverseRoutingIsTheGradient) {
  const int cols = 8;
  const t_ivec src_rows = int_vector({4, 0, 2});
  const t_ivec dst_rows = int_vector({1, 5, 3});
  const t_mat src = random_matrix(5, cols, 12);
  const t_mat dst("dst", 6, cols);
  const float untouched = -7.0f;
  Kokkos::deep_copy(dst, untouched);
  copy_rows(src, src_rows, dst, dst_rows);
  const auto sh = to_host(src);
  const auto dh = to_host(dst);
  const int expected_source[6] = {-1, 4, -1, 2, -1, 0};
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < cols; ++j)
      EXPECT_EQ(dh(i, j), expected_source[i] < 0 ? untouched : sh(expected_source[i], j)) << i << "," << j;

  const t_mat w_out = random_matrix(6, cols, 13);
  const auto numeric = central_differences(src, [&]() {
    copy_rows(src, src_rows, dst, dst_rows);
    return weighted_sum(dst, w_out);
  });
  const t_mat dsrc("dsrc", 5, cols);
  copy_rows(w_out, dst_rows, dsrc, src_rows);
  expect_gradients_near(elements(dsrc), numeric, "dsrc");
}

// ----------------------------------------------------------------------------------- element-wise

TEST(Elementwise, AddAndScaleInPlace) {
  const t_mat y = random_matrix(3, 5, 14);
  const t_mat x = random_matrix(3, 5, 15);
  const auto y0 = elements(y);
  const auto x0 = elements(x);
  add_inplace(y, x);
  const auto sum_v = elements(y);
  for (std::size_t i = 0; i < sum_v.size(); ++i) EXPECT_EQ(sum_v[i], float(float(y0[i]) + float(x0[i])));

  const t_vec v = random_vector(17, 16);
  const auto v0 = elements(v);
  scale_inplace(v, -2.5f);
  const auto scaled = elements(v);
  for (std::size_t i = 0; i < scaled.size(); ++i) EXPECT_EQ(scaled[i], float(v0[i]) * -2.5f);
}

// ----------------------------------------------------------------------------------------- AdamW

void check_adamw(float weight_decay) {
  SCOPED_TRACE("weight_decay=" + std::to_string(weight_decay));
  const int n = 37;
  AdamWHyper hyper;
  hyper.lr = 1e-2f;
  hyper.weight_decay = weight_decay;
  const t_vec params = random_vector(n, 17);
  const t_vec m("m", n), v("v", n);
  std::vector<double> p_ref = elements(params), m_ref(n, 0.0), v_ref(n, 0.0);
  for (int step = 1; step <= 3; ++step) {
    const t_vec grads = random_vector(n, 100 + step);
    const auto g = elements(grads);
    adamw_update(params, grads, m, v, hyper, step);
    const double bias1 = 1.0 - std::pow(double(hyper.beta1), step);
    const double bias2 = 1.0 - std::pow(double(hyper.beta2), step);
    for (int i = 0; i < n; ++i) {
      m_ref[i] = hyper.beta1 * m_ref[i] + (1.0 - hyper.beta1) * g[i];
      v_ref[i] = hyper.beta2 * v_ref[i] + (1.0 - hyper.beta2) * g[i] * g[i];
      p_ref[i] = p_ref[i] * (1.0 - double(hyper.lr) * hyper.weight_decay) -
                 hyper.lr * (m_ref[i] / bias1) / (std::sqrt(v_ref[i] / bias2) + hyper.eps);
    }
  }
  const auto p = elements(params);
  const auto mv = elements(m);
  const auto vv = elements(v);
  for (int i = 0; i < n; ++i) {
    EXPECT_NEAR(p[i], p_ref[i], 1e-6 + 1e-5 * std::abs(p_ref[i])) << i;
    EXPECT_NEAR(mv[i], m_ref[i], 1e-6) << i;
    EXPECT_NEAR(vv[i], v_ref[i], 1e-7) << i;
  }
}

TEST(AdamW, MatchesScalarReferenceOverThreeSteps) {
  check_adamw(0.0f);
  check_adamw(0.1f);
}

// The fused pass over one buffer decays exactly [0, decayed): the boundary falls inside a work block and
// the buffer ends in a partial block. Reference: the same float expression, element by element, on the host.
TEST(AdamW, FusedPassDecaysOnlyTheLeadingRangeAndMatchesElementwiseFloat) {
  const int n = 3 * 4096 + 37, decayed = 5000;
  AdamWHyper hyper;
  hyper.lr = 1e-2f;
  hyper.weight_decay = 0.5f;  // large, so a misplaced boundary is far outside the tolerance
  const t_vec params = random_vector(n, 31);
  const t_vec m("m", n), v("v", n);
  std::vector<float> p_ref(n), m_ref(n, 0.0f), v_ref(n, 0.0f);
  const auto p0 = elements(params);
  for (int i = 0; i < n; ++i) p_ref[i] = static_cast<float>(p0[i]);
  for (int step = 1; step <= 2; ++step) {
    const t_vec grads = random_vector(n, 200 + step);
    const auto g = elements(grads);
    adamw_update(params, grads, m, v, hyper, step, decayed);
    const float step_size = hyper.lr / static_cast<float>(1.0 - std::pow(double(hyper.beta1), step));
    const float inv_sqrt_bias2 =
        static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(double(hyper.beta2), step)));
    for (int i = 0; i < n; ++i) {
      const float gi = static_cast<float>(g[i]);
      const float decay = i < decayed ? 1.0f - hyper.lr * hyper.weight_decay : 1.0f;
      m_ref[i] = hyper.beta1 * m_ref[i] + (1.0f - hyper.beta1) * gi;
      v_ref[i] = hyper.beta2 * v_ref[i] + (1.0f - hyper.beta2) * gi * gi;
      p_ref[i] = p_ref[i] * decay - step_size * m_ref[i] / (std::sqrt(v_ref[i]) * inv_sqrt_bias2 + hyper.eps);
    }
  }
  const auto p = elements(params);
  const auto mv = elements(m);
  for (int i = 0; i < n; ++i) {
    // Within float contraction (FMA) of the same expression: a few ulps.
    ASSERT_NEAR(p[i], p_ref[i], 4e-7 * (1.0 + std::abs(p_ref[i]))) << i;
    ASSERT_NEAR(mv[i], m_ref[i], 1e-7) << i;
  }
}

TEST(AdamW, RejectsStepZero) {
  const t_vec x("x", 3);
  EXPECT_THROW(adamw_update(x, x, x, x, AdamWHyper{}, 0), std::invalid_argument);
}

// ------------------------------------------------------------------------------ gradient check

TEST(GradientCheck, SumOfSquaresIsNonFiniteExactlyWhenAnElementIs) {
  const int n = 10001;
  const t_vec v = random_vector(n, 22, -3.0f, 3.0f);
  double expected = 0.0;
  for (const double x : elements(v)) expected += x * x;
  EXPECT_NEAR(sum_of_squares(v), expected, 1e-12 * expected);
  EXPECT_EQ(first_non_finite(v), -1);
  auto host = Kokkos::create_mirror_view(v);
  Kokkos::deep_copy(host, v);
  // The largest floats: their squares overflow float but not the double sum.
  host(3) = std::numeric_limits<float>::max(), host(4) = -std::numeric_limits<float>::max();
  Kokkos::deep_copy(v, host);
  EXPECT_TRUE(std::isfinite(sum_of_squares(v)));
  EXPECT_EQ(first_non_finite(v), -1);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    SCOPED_TRACE(bad);
    host(9000) = bad, host(7000) = bad;
    Kokkos::deep_copy(v, host);
    EXPECT_FALSE(std::isfinite(sum_of_squares(v)));
    EXPECT_EQ(first_non_finite(v), 7000);
    host(9000) = 1.0f, host(7000) = 1.0f;
  }
  EXPECT_EQ(first_non_finite(t_vec("empty", 0)), -1);
  EXPECT_EQ(sum_of_squares(t_vec("empty", 0)), 0.0);
}

// ------------------------------------------------------------------------------------------- sum

TEST(Sum, MatchesDoubleHostSum) {
  for (const int n : {0, 1, 10001}) {
    const t_vec v = random_vector(n, 18, -1.0f, 3.0f);
    double expected = 0.0;
    for (const double x : elements(v)) expected += x;
    EXPECT_NEAR(sum(v), expected, 1e-12 * (1.0 + std::abs(expected))) << "n = " << n;
  }
}

// ------------------------------------------------------------------------------------ determinism

TEST(Determinism, RepeatedCallsAreBitwiseIdentical) {
  const int rows = 1000, cols = 300;  // several row chunks and several feature blocks
  const t_mat x = random_matrix(rows, cols, 19);
  const t_mat dy = random_matrix(rows, cols, 20);
  const t_vec weight = random_vector(cols, 21, 0.5f, 1.5f);
  const t_mat y("y", rows, cols);
  const t_vec rstd("rstd", rows);
  rmsnorm_forward(x, weight, y, rstd);
  std::vector<t_mat> dx;
  std::vector<t_vec> dweight;
  for (int run = 0; run < 2; ++run) {
    dx.push_back(t_mat("dx", rows, cols));
    dweight.push_back(t_vec("dweight", cols));
    rmsnorm_backward(dy, x, weight, rstd, dx.back(), dweight.back());
  }
  EXPECT_TRUE(bitwise_equal(dx[0], dx[1]));
  EXPECT_TRUE(bitwise_equal(dweight[0], dweight[1]));

  std::vector<int> id_list(rows);
  for (int i = 0; i < rows; ++i) id_list[i] = (i * 7) % 50;
  const t_ivec ids = int_vector(id_list);
  std::vector<int> row_list(rows);
  for (int i = 0; i < rows; ++i) row_list[i] = i;
  const t_ivec token_rows = int_vector(row_list);
  std::vector<t_mat> dtable{t_mat("dtable0", 50, cols), t_mat("dtable1", 50, cols)};
  for (const t_mat& d : dtable) embedding_backward(ids, token_rows, dy, d);
  EXPECT_TRUE(bitwise_equal(dtable[0], dtable[1]));

  std::vector<int> target_list(rows);
  for (int i = 0; i < rows; ++i) target_list[i] = i % 10 == 0 ? -1 : (i * 13) % cols;
  const t_ivec targets = int_vector(target_list);
  std::vector<t_mat> dlogits{t_mat("dlogits0", rows, cols), t_mat("dlogits1", rows, cols)};
  std::vector<t_vec> losses{t_vec("losses0", rows), t_vec("losses1", rows)};
  for (int run = 0; run < 2; ++run)
    softmax_xent_forward_backward(x, targets, 1.0f / rows, losses[run], dlogits[run]);
  EXPECT_TRUE(bitwise_equal(dlogits[0], dlogits[1]));
  EXPECT_TRUE(bitwise_equal(losses[0], losses[1]));
  EXPECT_EQ(sum(losses[0]), sum(losses[1]));

  std::vector<t_mat> products{t_mat("c0", cols, cols), t_mat("c1", cols, cols)};
  for (const t_mat& c : products) gemm(Trans::yes, Trans::no, 1.0f, x, dy, 0.0f, c, GemmBackend::portable);
  EXPECT_TRUE(bitwise_equal(products[0], products[1]));
}

}  // namespace
}  // namespace minimllm
