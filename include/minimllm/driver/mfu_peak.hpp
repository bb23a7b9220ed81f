// The MFU denominators per rank, the same on every rank: the hardware's dense peak (MFU) and the best
// GEMM rate measured on it ("attainable"), which is also the planners' default compute rate.
#pragma once

#include <string>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/kernels/gemm.hpp"

namespace minimllm {

struct PeakChoice {
  // Dense peak per rank at the precision: the deck's machine.peak_gflops; else the datasheet of every
  // rank's GPU (device_peak.hpp, divided among ranks sharing one); else the CPU cores this rank owns
  // (cpu_peak.hpp); the smallest over ranks. Unknown hardware: the attainable rate, said so in the source.
  double peak_gflops = 0.0;
  std::string peak_source;
  // The fastest backend's GEMM rate at 1024^3 (host: BLAS and the portable kernel; CUDA: cuBLAS), mean
  // over ranks. Never a slow backend's rate alone: MFU is not flattered by a slow BLAS.
  double attainable_gflops = 0.0;
  std::string attainable_source;
  // The planners' compute rate: the deck's machine.peak_gflops when given (a cost model for that
  // machine), else the attainable rate (what the GEMMs really do here).
  double planning_gflops = 0.0;
  std::string planning_source;
};

// Collective over world (every rank measures).
PeakChoice choose_peak(const RunConfig& config, GemmPrecision precision, const World& world);

}  // namespace minimllm
