// Vendor peak rates of known GPUs, the denominator of MFU when a run is on one.
#pragma once

#include <optional>
#include <string>

namespace minimllm {

enum class Precision { fp32, tf32, bf16 };  // fp32: CUDA cores; tf32, bf16: tensor cores
const char* to_string(Precision precision);

// Dense (no 2:4 sparsity) peak GFLOP/s of one GPU, from the vendor datasheet, looked up by the name
// cudaGetDeviceProperties reports (e.g. "NVIDIA H100 80GB HBM3"); nullopt for a device not in the table.
std::optional<double> dense_peak_gflops(const std::string& device_name, Precision precision);

}  // namespace minimllm
