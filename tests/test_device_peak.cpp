// Dense peak table: names as cudaGetDeviceProperties reports them, and names that must not match.
#include <gtest/gtest.h>

#include "minimllm/metrics/device_peak.hpp"

namespace minimllm {
namespace {

TEST(DevicePeak, KnownDevicesHaveDenseDatasheetRates) {
  EXPECT_DOUBLE_EQ(*dense_peak_gflops("NVIDIA H100 80GB HBM3", Precision::fp32), 67e3);
  EXPECT_DOUBLE_EQ(*dense_peak_gflops("NVIDIA H100 80GB HBM3", Precision::tf32), 494.5e3);
  EXPECT_DOUBLE_EQ(*dense_peak_gflops("NVIDIA H100 80GB HBM3", Precision::bf16), 989.5e3);
  EXPECT_DOUBLE_EQ(*dense_peak_gflops("NVIDIA H100 PCIe", Precision::fp32), 51e3);
  EXPECT_DOUBLE_EQ(*dense_peak_gflops("NVIDIA H100 PCIe", Precision::bf16), 756.5e3);
  EXPECT_DOUBLE_EQ(*dense_peak_gflops("NVIDIA H200", Precision::bf16), 989.5e3);
  EXPECT_DOUBLE_EQ(*dense_peak_gflops("NVIDIA H200 NVL", Precision::fp32), 60e3);
  EXPECT_DOUBLE_EQ(*dense_peak_gflops("NVIDIA A100-SXM4-80GB", Precision::fp32), 19.5e3);
  EXPECT_DOUBLE_EQ(*dense_peak_gflops("NVIDIA A100-PCIE-40GB", Precision::tf32), 156e3);
  EXPECT_DOUBLE_EQ(*dense_peak_gflops("NVIDIA A100 80GB PCIe", Precision::bf16), 312e3);
}

TEST(DevicePeak, FasterFromFp32ToTf32ToBf16) {
  for (const char* name : {"NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200",
                           "NVIDIA H200 NVL", "NVIDIA A100-SXM4-40GB"}) {
    const double fp32 = *dense_peak_gflops(name, Precision::fp32);
    const double tf32 = *dense_peak_gflops(name, Precision::tf32);
    EXPECT_LT(fp32, tf32) << name;
    EXPECT_LT(tf32, *dense_peak_gflops(name, Precision::bf16)) << name;
  }
}

TEST(DevicePeak, UnknownDevicesAndLookAlikesAreUnknown) {
  for (const char* name : {"host", "", "NVIDIA GH200 480GB", "NVIDIA RTX A1000", "NVIDIA H100", "NVIDIA H800",
                           "NVIDIA A10", "Tesla V100-SXM2-32GB"}) {
    EXPECT_FALSE(dense_peak_gflops(name, Precision::fp32).has_value()) << name;
  }
}

TEST(DevicePeak, PrecisionNames) {
  EXPECT_STREQ(to_string(Precision::fp32), "fp32");
  EXPECT_STREQ(to_string(Precision::tf32), "tf32");
  EXPECT_STREQ(to_string(Precision::bf16), "bf16");
}

}  // namespace
}  // namespace minimllm
