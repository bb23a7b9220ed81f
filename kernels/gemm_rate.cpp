#include "minimllm/kernels/gemm_rate.hpp"

#include <algorithm>

#include "minimllm/core/clock.hpp"
#include "minimllm/kernels/workspace.hpp"

namespace minimllm {

double measure_gemm_gflops(GemmPrecision precision, int n, GemmBackend backend) {
  t_mat a("gemm_rate::a", n, n), b("gemm_rate::b", n, n), c("gemm_rate::c", n, n);
  Kokkos::deep_copy(a, 1.0f), Kokkos::deep_copy(b, 1.0f);
  Workspace workspace;  // bf16 rounds its operands into scratch: the arena fits them after the warm-up
  const auto call = [&] {
    const WorkspaceScope scope(workspace);
    gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c, backend, precision);
    ExecSpace().fence();
  };
  call();  // warm-up: handles, scratch
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now_seconds();
    call();
    best = std::min(best, now_seconds() - t0);
  }
  return 2.0 * n * n * n / best * 1e-9;
}

}  // namespace minimllm
