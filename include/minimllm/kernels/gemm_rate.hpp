// This rank's dense GEMM rate, measured: the default cost model's and the measured MFU peak's rate when
// neither the deck nor the command line gives one.
#pragma once

#include "minimllm/kernels/gemm.hpp"

namespace minimllm {

// GFLOP/s of gemm on n x n x n with the backend, best of 5 fenced calls after a warm-up.
double measure_gemm_gflops(GemmPrecision precision, int n = 1024,
                           GemmBackend backend = default_gemm_backend());
// GFLOP/s of C[m x n] = A[m x k] B[k x n] on the backend, best of `repeats` fenced calls after a warm-up.
double measure_gemm_gflops(int m, int n, int k, GemmPrecision precision, GemmBackend backend, int repeats);

}  // namespace minimllm
