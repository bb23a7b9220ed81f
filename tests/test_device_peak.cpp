// Dense peak table and CPU peak arithmetic: names as cudaGetDeviceProperties reports them, and names that
// must not match.
#include <gtest/gtest.h>

#include "minimllm/metrics/cpu_peak.hpp"
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

// CPU peaks from injected descriptions: the arithmetic, not the live machine.
CpuDescription xeon(double ghz) {
  CpuDescription cpu = parse_cpuinfo(
      "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Processor\n"
      "flags\t\t: fpu sse fma avx2 avx512f avx512_bf16 amx_bf16 amx_tile\ncpu MHz\t\t: 2600.000\n");
  cpu.arch = "x86_64";
  cpu.clock_ghz = ghz;
  return cpu;
}

TEST(CpuPeak, ParsesFlagsVendorAndClockFromCpuinfo) {
  const CpuDescription cpu = xeon(2.6);
  EXPECT_EQ(cpu.vendor, "GenuineIntel");
  EXPECT_EQ(cpu.model_name, "Intel(R) Xeon(R) Processor");
  EXPECT_TRUE(cpu.fma && cpu.avx512f && cpu.avx512_bf16 && cpu.amx_bf16);
  EXPECT_NE(cpu.clock_source.find("cpu MHz"), std::string::npos);
  const CpuDescription plain = parse_cpuinfo("flags\t: fpu avx512fx avx2\n");  // whole words only
  EXPECT_FALSE(plain.avx512f || plain.fma);
}

TEST(CpuPeak, CoresTimesFmaUnitsTimesLanesTimesTwoTimesClock) {
  CpuDescription cpu = xeon(2.6);
  EXPECT_DOUBLE_EQ(cpu_dense_peak(cpu, Precision::fp32, 1)->gflops, 2 * 16 * 2 * 2.6);  // 166.4
  EXPECT_DOUBLE_EQ(cpu_dense_peak(cpu, Precision::fp32, 2)->gflops, 2 * 2 * 16 * 2 * 2.6);
  EXPECT_DOUBLE_EQ(cpu_dense_peak(cpu, Precision::bf16, 1)->gflops, 2 * 1024 * 2.6);  // AMX
  cpu.amx_bf16 = false;
  EXPECT_DOUBLE_EQ(cpu_dense_peak(cpu, Precision::bf16, 1)->gflops, 2 * 2 * 16 * 2 * 2.6);  // AVX512_BF16
  cpu.avx512_bf16 = false;
  EXPECT_DOUBLE_EQ(cpu_dense_peak(cpu, Precision::bf16, 1)->gflops, 2 * 16 * 2 * 2.6);
  cpu.avx512f = false;  // AVX2 + FMA (Haswell .. Zen 3)
  EXPECT_DOUBLE_EQ(cpu_dense_peak(cpu, Precision::fp32, 1)->gflops, 2 * 8 * 2 * 2.6);
  cpu.avx512f = true, cpu.vendor = "AuthenticAMD";  // Zen 4: AVX-512 on 256-bit pipes
  EXPECT_DOUBLE_EQ(cpu_dense_peak(cpu, Precision::fp32, 1)->gflops, 16 * 2 * 2.6);
  EXPECT_NE(cpu_dense_peak(cpu, Precision::fp32, 1)->source.find("2.60 GHz"), std::string::npos);
}

TEST(CpuPeak, MeasuredClockIsAPlausibleCoreClock) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__aarch64__))
  const double ghz = measure_core_clock_ghz();
  EXPECT_GT(ghz, 0.3);  // timed on the thread's CPU clock: other processes' time does not count
  EXPECT_LT(ghz, 7.0);  // no core runs faster: a chain the compiler or core folded away would read far above
#else
  EXPECT_EQ(measure_core_clock_ghz(), 0.0);
#endif
}

TEST(CpuPeak, UnknownClockIsaOrArchitectureIsUnknown) {
  EXPECT_FALSE(cpu_dense_peak(xeon(0.0), Precision::fp32, 1).has_value());
  CpuDescription arm = xeon(2.6);
  arm.arch = "aarch64";
  EXPECT_FALSE(cpu_dense_peak(arm, Precision::fp32, 1).has_value());
  CpuDescription old = xeon(2.6);
  old.fma = old.avx512f = false;
  EXPECT_FALSE(cpu_dense_peak(old, Precision::fp32, 1).has_value());
}

}  // namespace
}  // namespace minimllm
