#include "minimllm/driver/gemm_choice.hpp"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <stdexcept>

#include "minimllm/core/clock.hpp"

namespace minimllm {
namespace {

// Token rows a class is timed at: the run's, fewer where its activation operands (rows x the weight's
// larger side) would exceed 64 MiB (the LM head's logits at 2,048 rows would be 0.4 GB, outside the
// run's memory accounting), at least 64.
int timing_rows(const GemmShapeClass& s, int rows) {
  constexpr long long kOperandFloats = 16LL << 20;
  return static_cast<int>(
      std::max(64LL, std::min<long long>(rows, kOperandFloats / std::max(s.rows, s.cols))));
}

// Seconds of one class's GEMM on the backend at `rows` token rows: best of 3 fenced calls after a warm-up.
double time_class(const GemmShapeClass& s, int rows, GemmBackend backend, GemmPrecision precision) {
  // fwd: (rows x R)(R x C); dgrad: (rows x C)(R x C)^T; wgrad: (rows x R)^T (rows x C) -> R x C.
  const bool wgrad = s.trans_a == Trans::yes, dgrad = s.trans_b == Trans::yes;
  const t_mat a("gemm_choice::a", rows, dgrad ? s.cols : s.rows);
  const t_mat b("gemm_choice::b", wgrad ? rows : s.rows, s.cols);
  const t_mat c("gemm_choice::c", wgrad ? s.rows : rows, dgrad ? s.rows : s.cols);
  Kokkos::deep_copy(a, 0.5f), Kokkos::deep_copy(b, 0.25f);
  double best = 1e30;
  for (int rep = 0; rep < 4; ++rep) {
    ExecSpace().fence();
    const double t0 = now_seconds();
    gemm(s.trans_a, s.trans_b, 1.0f, a, b, 0.0f, c, backend, precision);
    ExecSpace().fence();
    if (rep > 0) best = std::min(best, now_seconds() - t0);
  }
  return best;
}

// Choices of this process's earlier runs, per (class, precision): later runs reuse them (same plans and
// losses within a process) when every rank holds them.
std::map<std::pair<std::string, int>, GemmBackend>& cached_choices() {
  static std::map<std::pair<std::string, int>, GemmBackend> cache;
  return cache;
}

// "blas", "portable" or "mixed": what the selection runs, in a word.
std::string backend_summary(const GemmChoice& choice) {
  return choice.portable_classes == 0                ? "blas"
         : choice.portable_classes == choice.classes ? "portable"
                                                     : "mixed";
}

}  // namespace

std::vector<GemmShapeClass> model_gemm_classes(const ModelConfig& m) {
  std::vector<std::pair<int, int>> weights;
  const auto block = [&](int width, int hidden) {
    weights.insert(weights.end(), {{width, 3 * width}, {width, width}, {width, hidden}, {hidden, width}});
  };
  for (const EncoderConfig& e : m.encoders) {
    weights.push_back({static_cast<int>(e.input_width()), e.width});
    if (e.layers > 0) block(e.width, e.mlp_ratio * e.width);
    weights.push_back({e.width, m.llm.width});
  }
  weights.push_back({m.llm.width, m.llm.width});
  block(m.llm.width, m.llm.mlp_ratio * m.llm.width);
  weights.push_back({m.llm.width, m.llm.vocab});
  std::vector<GemmShapeClass> classes;
  for (const auto& [rows, cols] : weights)
    for (const auto& [ta, tb] :
         {std::pair{Trans::no, Trans::no}, {Trans::no, Trans::yes}, {Trans::yes, Trans::no}}) {
      const GemmShapeClass c{ta, tb, rows, cols};
      if (std::find(classes.begin(), classes.end(), c) == classes.end()) classes.push_back(c);
    }
  return classes;
}

// Portable must beat BLAS by 5% to be chosen: near-ties go to the vendor library, so that timing noise
// does not flip a class between two runs of the same deck (each choice rounds its GEMMs differently).
constexpr double kPortableMargin = 0.95;

GemmChoice choose_gemm(const std::string& mode, const std::vector<GemmShapeClass>& classes, int rows,
                       GemmPrecision precision, const World& world) {
  GemmChoice choice;
  choice.mode = mode;
  choice.classes = static_cast<int>(classes.size());
  const GemmBackend fallback = default_gemm_backend();
  if (fallback != GemmBackend::blas || mode != "auto") {
    // One backend for all: cuBLAS on CUDA (whatever the mode), portable without host memory, else the mode.
    const GemmBackend backend = fallback != GemmBackend::blas ? fallback
                                : mode == "portable"          ? GemmBackend::portable
                                                              : GemmBackend::blas;
    for (const GemmShapeClass& c : classes) choice.selection.push_back({c, backend});
    choice.backend = to_string(backend);
    choice.portable_classes = backend == GemmBackend::portable ? choice.classes : 0;
    choice.line = fmt::format("gemm: {} for all {} shape classes (runtime.gemm: {})", choice.backend,
                              choice.classes, mode);
    return choice;
  }
  // A cached choice for every class on every rank, and the same one: reuse it. Else all measure.
  std::vector<int> codes;
  for (const GemmShapeClass& c : classes) {
    const auto it = cached_choices().find({to_string(c), static_cast<int>(precision)});
    codes.push_back(it == cached_choices().end() ? -1 : static_cast<int>(it->second));
  }
  std::vector<int> low(codes.size()), high(codes.size());
  MPI_Allreduce(codes.data(), low.data(), static_cast<int>(codes.size()), MPI_INT, MPI_MIN, world.comm);
  MPI_Allreduce(codes.data(), high.data(), static_cast<int>(codes.size()), MPI_INT, MPI_MAX, world.comm);
  const bool reuse = low == high && std::find(low.begin(), low.end(), -1) == low.end();
  std::vector<double> local, sum(2 * classes.size(), 0.0);
  if (!reuse) {
    for (const GemmShapeClass& c : classes) {
      local.push_back(time_class(c, timing_rows(c, rows), GemmBackend::blas, precision));
      local.push_back(time_class(c, timing_rows(c, rows), GemmBackend::portable, precision));
    }
    MPI_Allreduce(local.data(), sum.data(), static_cast<int>(local.size()), MPI_DOUBLE, MPI_SUM, world.comm);
  }
  double blas_seconds = 0.0, portable_seconds = 0.0, chosen_seconds = 0.0, flops = 0.0;
  for (std::size_t i = 0; i < classes.size(); ++i) {
    const GemmShapeClass& c = classes[i];
    const GemmBackend backend = reuse ? static_cast<GemmBackend>(low[i])
                                : sum[2 * i + 1] < kPortableMargin * sum[2 * i] ? GemmBackend::portable
                                                                                : GemmBackend::blas;
    cached_choices()[{to_string(c), static_cast<int>(precision)}] = backend;
    choice.selection.push_back({c, backend});
    if (backend == GemmBackend::portable) ++choice.portable_classes;
    blas_seconds += sum[2 * i], portable_seconds += sum[2 * i + 1];
    chosen_seconds += backend == GemmBackend::portable ? sum[2 * i + 1] : sum[2 * i];
    flops += 2.0 * timing_rows(c, rows) * c.rows * c.cols * world.size;
  }
  choice.backend = backend_summary(choice);
  if (reuse) {
    choice.line = fmt::format(
        "gemm: auto chose portable for {} of {} shape classes, blas for the rest (this process's earlier "
        "measurement)",
        choice.portable_classes, choice.classes);
  } else {
    const auto rate = [&](double seconds) {
      return seconds > 0.0 ? flops / seconds * 1e-9 / world.size : 0.0;
    };
    choice.line = fmt::format(
        "gemm: auto chose portable for {} of {} shape classes, blas for the rest (measured at up to {} rows, "
        "summed "
        "over classes: blas {:.1f}, portable {:.1f}, chosen {:.1f} GFLOP/s per rank)",
        choice.portable_classes, choice.classes, rows, rate(blas_seconds), rate(portable_seconds),
        rate(chosen_seconds));
  }
  return choice;
}

std::string encode_gemm_selection(const GemmSelection& selection) {
  std::string text;
  for (const auto& [cls, backend] : selection)
    text += (text.empty() ? "" : ";") + to_string(cls) + "=" + to_string(backend);
  return text;
}

GemmChoice decode_gemm_selection(const std::string& text, const std::string& source) {
  GemmChoice choice;
  choice.mode = "auto";
  std::size_t begin = 0;
  while (begin < text.size()) {
    const std::size_t end = std::min(text.find(';', begin), text.size());
    const std::string item = text.substr(begin, end - begin);
    begin = end + 1;
    char kind[16] = {}, backend[16] = {};
    GemmShapeClass c;
    if (std::sscanf(item.c_str(), "%15s %dx%d=%15s", kind, &c.rows, &c.cols, backend) != 4)
      throw std::invalid_argument("gemm selection item '" + item + "' is not 'KIND RxC=BACKEND'");
    const std::string k = kind, b = backend;
    c.trans_a = k == "wgrad" || k == "tt" ? Trans::yes : Trans::no;
    c.trans_b = k == "dgrad" || k == "tt" ? Trans::yes : Trans::no;
    if (to_string(c) != item.substr(0, item.find('=')) || (b != "blas" && b != "portable" && b != "cublas"))
      throw std::invalid_argument("gemm selection item '" + item + "' is unknown");
    const GemmBackend g = b == "blas"       ? GemmBackend::blas
                          : b == "portable" ? GemmBackend::portable
                                            : GemmBackend::cublas;
    choice.selection.push_back({c, g});
    choice.portable_classes += g == GemmBackend::portable;
  }
  choice.classes = static_cast<int>(choice.selection.size());
  choice.backend = backend_summary(choice);
  if (!choice.selection.empty() && choice.selection.front().second == GemmBackend::cublas)
    choice.backend = "cublas";
  choice.line = fmt::format("gemm: portable for {} of {} shape classes, the rest blas ({})",
                            choice.portable_classes, choice.classes, source);
  return choice;
}

std::string generic_blas_warning(const std::string& core, const std::string& config, bool avx512, bool avx2,
                                 const GemmChoice& choice) {
  if (core.empty()) return "";
  const bool generic = openblas_core_is_generic(core);
  if (!generic || !(avx512 || avx2)) return "";
  const std::string version = config.substr(0, config.find(' ', config.find(' ') + 1));
  return fmt::format(
      "warning: {} runs its generic '{}' kernel on this CPU ({} present): set OPENBLAS_CORETYPE={} (or link "
      "a BLAS "
      "tuned for it); runtime.gemm: {} uses portable for {} of {} shape classes",
      version.empty() ? "OpenBLAS" : version, core, avx512 ? "AVX-512" : "AVX2",
      avx512 ? "SKYLAKEX" : "HASWELL", choice.mode, choice.portable_classes, choice.classes);
}

std::string blas_affinity_warning(int blas_threads, int cores_allowed, bool own_pool) {
  if (!own_pool || cores_allowed <= 0 || blas_threads <= cores_allowed) return "";
  return fmt::format(
      "warning: runtime.blas_threads is {} but this rank's main thread may run on {} core(s) (its CPU "
      "affinity: OMP_PROC_BIND/OMP_PLACES or the launcher's binding); OpenBLAS's own threads inherit it and "
      "share those cores: bind each rank to {} cores (e.g. OMP_PROC_BIND=false, or the launcher's "
      "per-rank core count) or link OpenBLAS's OpenMP build",
      blas_threads, cores_allowed, blas_threads);
}

int cores_allowed_to_this_thread() {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
#else
  return 0;  // unknown: no warning
#endif
}

}  // namespace minimllm
