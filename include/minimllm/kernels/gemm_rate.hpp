// This rank's dense GEMM rate, measured: the default cost model's and the measured MFU peak's rate when
// neither the deck nor the command line gives one.
#pragma once

#include "minimllm/kernels/gemm.hpp"

namespace minimllm {

// GFLOP/s of gemm (the default backend) on n x n x n, best of 5 fenced calls after a warm-up.
double measure_gemm_gflops(GemmPrecision precision, int n = 1024);

}  // namespace minimllm
