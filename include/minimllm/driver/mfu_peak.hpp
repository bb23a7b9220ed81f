// The MFU denominator per rank, the same on every rank (the planners' default cost model depends on it).
#pragma once

#include <string>
#include <utility>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/kernels/gemm.hpp"

namespace minimllm {

// The deck's value; else the datasheet dense peak of the precision when every rank's GPU is in the table
// (the smallest, divided among the ranks that share one GPU); else this rank's measured GEMM rate,
// averaged over ranks. Returns GFLOP/s per rank and where it came from. Collective over world.
std::pair<double, std::string> choose_peak(const RunConfig& config, GemmPrecision precision,
                                           const World& world);

}  // namespace minimllm
