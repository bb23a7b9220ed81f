#include "minimllm/kernels/gemm_rate.hpp"

#include <algorithm>

#include "minimllm/core/clock.hpp"
#include "minimllm/kernels/workspace.hpp"

namespace minimllm {

double measure_gemm_gflops(GemmPrecision precision, int n, GemmBackend backend) {
  return measure_gemm_gflops(n, n, n, precision, backend, 5);
}

double measure_gemm_gflops(int m, int n, int k, GemmPrecision precision, GemmBackend backend, int repeats) {
  t_mat a("gemm_rate::a", m, k), b("gemm_rate::b", k, n), c("gemm_rate::c", m, n);
  Kokkos::deep_copy(a, 1.0f), Kokkos::deep_copy(b, 1.0f);
  Workspace workspace;  // bf16 rounds its operands into scratch: the arena fits them after the warm-up
  const auto call = [&] {
    const WorkspaceScope scope(workspace);
    gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c, backend, precision);
    ExecSpace().fence();
  };
  call();  // warm-up: handles, scratch
  double best = 1e30;
  for (int rep = 0; rep < repeats; ++rep) {
    const double t0 = now_seconds();
    call();
    best = std::min(best, now_seconds() - t0);
  }
  return 2.0 * m * n * k / best * 1e-9;
}

}  // namespace minimllm
