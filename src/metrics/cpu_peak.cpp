#include "minimllm/metrics/cpu_peak.hpp"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>

namespace minimllm {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string trim(const std::string& s) {
  const auto first = s.find_first_not_of(" \t");
  const auto last = s.find_last_not_of(" \t\r");
  return first == std::string::npos ? std::string() : s.substr(first, last - first + 1);
}

// The value of the first "key : value" line of cpuinfo text; empty if absent.
std::string cpuinfo_field(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const auto colon = line.find(':');
    if (colon != std::string::npos && trim(line.substr(0, colon)) == key) return trim(line.substr(colon + 1));
  }
  return {};
}

bool has_flag(const std::string& flags, const std::string& flag) {
  std::istringstream in(flags);
  for (std::string f; in >> f;)
    if (f == flag) return true;
  return false;
}

}  // namespace

double measure_core_clock_ghz() {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__aarch64__))
  // A chain of dependent register-register adds retires one add per cycle on x86-64 and AArch64 cores
  // (an add of an immediate could be folded at rename on some cores, hence a register the compiler cannot
  // see through). Timed on the thread's CPU clock, so time the scheduler gives to other processes does not
  // count (on a loaded machine a wall-clock trial reads slow); the fastest of several short trials.
  std::uint64_t one = 1;
  asm volatile("" : "+r"(one));
  constexpr long kAdds = 4'000'000;  // ~1 ms at 4 GHz
  const auto thread_seconds = [] {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  double best = 0.0;
  for (int trial = 0; trial < 10; ++trial) {
    std::uint64_t x = static_cast<std::uint64_t>(trial);
    const double t0 = thread_seconds();
    for (long i = 0; i < kAdds / 8; ++i) {
      for (int k = 0; k < 8; ++k) {
        x += one;
        asm volatile("" : "+r"(x));
      }
    }
    const double seconds = thread_seconds() - t0;
    if (x != static_cast<std::uint64_t>(trial + kAdds / 8 * 8)) return 0.0;  // the chain did not run
    if (seconds > 0.0) best = std::max(best, kAdds / seconds * 1e-9);
  }
  return best;
#else
  return 0.0;
#endif
}

CpuDescription parse_cpuinfo(const std::string& text) {
  CpuDescription cpu;
  cpu.vendor = cpuinfo_field(text, "vendor_id");
  cpu.model_name = cpuinfo_field(text, "model name");
  const std::string flags = cpuinfo_field(text, "flags");
  cpu.fma = has_flag(flags, "fma");
  cpu.avx512f = has_flag(flags, "avx512f");
  cpu.avx512_bf16 = has_flag(flags, "avx512_bf16");
  cpu.amx_bf16 = has_flag(flags, "amx_bf16");
  const std::string mhz = cpuinfo_field(text, "cpu MHz");
  if (!mhz.empty()) {
    cpu.clock_ghz = std::stod(mhz) / 1000.0;
    cpu.clock_source = "/proc/cpuinfo cpu MHz (the current clock; no cpufreq max in sysfs)";
  }
  return cpu;
}

namespace {

CpuDescription describe_this_cpu() {
  CpuDescription cpu = parse_cpuinfo(read_file("/proc/cpuinfo"));
  utsname name{};
  if (uname(&name) == 0) cpu.arch = name.machine;
  const std::string khz = trim(read_file("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"));
  if (!khz.empty()) {
    cpu.clock_ghz = std::stod(khz) / 1e6;
    cpu.clock_source = "sysfs cpuinfo_max_freq (maximum, may exceed the all-core AVX-512 clock)";
  }
  // A virtual machine's /proc/cpuinfo may give the nominal clock of a core that runs faster (turbo): a
  // peak from it could be below what a GEMM measures. The clock the core runs at, measured, when higher.
  const double measured = measure_core_clock_ghz();
  if (measured > cpu.clock_ghz) {
    cpu.clock_source = cpu.clock_ghz > 0.0
                           ? fmt::format(
                                 "measured: a dependent add chain ran at {:.2f} GHz, above the {:.2f} "
                                 "GHz of {}",
                                 measured, cpu.clock_ghz, cpu.clock_source)
                           : "measured: a dependent add chain (no clock in sysfs or /proc/cpuinfo)";
    cpu.clock_ghz = measured;
  }
  return cpu;
}

}  // namespace

CpuDescription detect_cpu() {
  static const CpuDescription cpu = describe_this_cpu();  // once per process: the clock is measured
  return cpu;
}

std::optional<CpuPeak> cpu_dense_peak(const CpuDescription& cpu, Precision precision, int cores) {
  if (cpu.clock_ghz <= 0.0 || cores < 1 || cpu.arch != "x86_64") return std::nullopt;
  const bool amd = cpu.vendor == "AuthenticAMD";
  // fp32 FMAs per cycle per core, with the assumption behind it.
  int fp32_fma_per_cycle = 0;
  std::string unit;
  if (cpu.avx512f && !amd) {
    fp32_fma_per_cycle = 2 * 16, unit = "2 AVX-512 FMA units x 16 fp32 lanes (Xeon Scalable server core)";
  } else if (cpu.avx512f) {
    fp32_fma_per_cycle = 16, unit = "AVX-512 as 2 x 256-bit FMA pipes x 8 fp32 lanes (Zen 4)";
  } else if (cpu.fma) {
    fp32_fma_per_cycle = 2 * 8, unit = "2 AVX2 FMA units x 8 fp32 lanes";
  } else {
    return std::nullopt;
  }
  double flops_per_cycle = 2.0 * fp32_fma_per_cycle;
  if (precision == Precision::bf16 && cpu.amx_bf16) {
    // AMX: 1024 bf16 multiply-adds per cycle per core (one TMUL); the hardware's dense bf16 peak, as the
    // tensor cores are a GPU's, though minimllm's CPU GEMMs do not use it.
    flops_per_cycle = 2.0 * 1024, unit = "AMX-BF16 TMUL, 1024 bf16 multiply-adds";
  } else if (precision == Precision::bf16 && cpu.avx512_bf16) {
    flops_per_cycle *= 2.0, unit += ", x 2 for AVX512_BF16 dot products";
  }
  const double gflops = cores * flops_per_cycle * cpu.clock_ghz;
  return CpuPeak{gflops, fmt::format("CPU dense {} peak: {} core(s) x {} FLOP/cycle ({}) x {:.2f} GHz ({})",
                                     to_string(precision), cores, flops_per_cycle, unit, cpu.clock_ghz,
                                     cpu.clock_source)};
}

}  // namespace minimllm
