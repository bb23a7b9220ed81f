#include "minimllm/metrics/device_peak.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace minimllm {
namespace {

struct Peak {
  double fp32, tf32, bf16;  // dense TFLOP/s
};

// Datasheets print tensor-core rates with 2:4 sparsity (marked "*"); the dense rate is half of that.
constexpr double dense(double sparse_tflops) { return sparse_tflops / 2.0; }

// NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100): FP32 67 / 51 / 60 TFLOPS,
// TF32 989* / 756* / 835*, BF16 1,979* / 1,513* / 1,671* for SXM / PCIe / NVL.
constexpr Peak kH100Sxm{67.0, dense(989.0), dense(1979.0)};
constexpr Peak kH100Pcie{51.0, dense(756.0), dense(1513.0)};
constexpr Peak kH100Nvl{60.0, dense(835.0), dense(1671.0)};
// NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200): SXM as H100 SXM (same
// GH100 compute, more memory); NVL as H100 NVL.
constexpr Peak kH200Sxm = kH100Sxm;
constexpr Peak kH200Nvl = kH100Nvl;
// NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100): FP32 19.5, TF32 156
// (312*), BF16 312 (624*), the same for 40/80 GB, SXM4 and PCIe.
constexpr Peak kA100{19.5, 156.0, 312.0};

// Upper-case alphanumeric words of a name: "NVIDIA A100-SXM4-80GB" -> NVIDIA, A100, SXM4, 80GB. Whole
// words keep "GH200" from matching H200 and "A1000" from matching A100.
std::vector<std::string> words(const std::string& name) {
  std::vector<std::string> out;
  std::string word;
  for (char c : name + ' ') {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    } else if (!word.empty()) {
      out.push_back(word);
      word.clear();
    }
  }
  return out;
}

std::optional<Peak> lookup(const std::string& device_name) {
  const std::vector<std::string> w = words(device_name);
  const auto has = [&](const char* word) { return std::find(w.begin(), w.end(), word) != w.end(); };
  if (has("H200")) return has("NVL") ? kH200Nvl : kH200Sxm;  // "NVIDIA H200", "NVIDIA H200 NVL"
  if (has("H100")) {
    if (has("PCIE")) return kH100Pcie;                              // "NVIDIA H100 PCIe"
    if (has("NVL")) return kH100Nvl;                                // "NVIDIA H100 NVL"
    if (has("HBM3") || has("SXM") || has("SXM5")) return kH100Sxm;  // "NVIDIA H100 80GB HBM3"
    return std::nullopt;  // a bare "H100" does not say which board it is
  }
  if (has("A100")) return kA100;
  return std::nullopt;
}

}  // namespace

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::fp32:
      return "fp32";
    case Precision::tf32:
      return "tf32";
    case Precision::bf16:
      return "bf16";
  }
  return "unknown";
}

std::optional<double> dense_peak_gflops(const std::string& device_name, Precision precision) {
  const std::optional<Peak> peak = lookup(device_name);
  if (!peak) return std::nullopt;
  const double tflops = precision == Precision::fp32   ? peak->fp32
                        : precision == Precision::tf32 ? peak->tf32
                                                       : peak->bf16;
  return tflops * 1e3;
}

}  // namespace minimllm
