// The dense peak of the CPU cores a rank owns: cores x FMA units x SIMD lanes x 2 x clock, the MFU
// denominator on a host backend (the GPU's comes from device_peak.hpp's datasheet table).
#pragma once

#include <optional>
#include <string>

#include "minimllm/metrics/device_peak.hpp"

namespace minimllm {

// What the peak arithmetic needs to know about one core; detect_cpu() reads it, tests inject it.
struct CpuDescription {
  std::string arch;        // "x86_64", "aarch64", ...
  std::string vendor;      // "GenuineIntel", "AuthenticAMD", ...
  std::string model_name;  // /proc/cpuinfo "model name"
  bool fma = false, avx512f = false, avx512_bf16 = false, amx_bf16 = false;
  double clock_ghz = 0.0;    // 0: unknown
  std::string clock_source;  // e.g. "sysfs cpuinfo_max_freq"
};

struct CpuPeak {
  double gflops = 0.0;  // for all the cores counted
  std::string source;   // the formula with its numbers and assumptions, one line
};

// The flags, vendor and model name of /proc/cpuinfo's first processor (text as the file holds it).
CpuDescription parse_cpuinfo(const std::string& cpuinfo_text);
// The clock this core runs at now, in GHz, from the rate of a dependent add chain (one add per cycle);
// 0 where it cannot be measured (another architecture or compiler).
double measure_core_clock_ghz();
// This machine: /proc/cpuinfo, clock from /sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq, else
// /proc/cpuinfo "cpu MHz"; the measured clock instead where it is higher (a VM's nominal clock, turbo).
// Described once per process (the first call measures the clock); later calls return the same.
CpuDescription detect_cpu();

// Dense peak of `cores` cores at `precision` (fp32: FMA on the widest vector unit; bf16: AMX tiles where
// present, else AVX512_BF16 dot products, else the fp32 rate); nullopt for an unknown ISA or clock.
std::optional<CpuPeak> cpu_dense_peak(const CpuDescription& cpu, Precision precision, int cores);

}  // namespace minimllm
