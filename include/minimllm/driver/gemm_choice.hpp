// runtime.gemm: which GEMM backend each of the model's shape classes runs on, chosen at start-up and the
// same on every rank; and a warning when the BLAS runs a generic kernel on a CPU it does not know.
#pragma once

#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/kernels/gemm.hpp"

namespace minimllm {

// The model's linear layers' GEMM classes (forward, data and weight gradient of every distinct weight
// shape), in a fixed order.
std::vector<GemmShapeClass> model_gemm_classes(const ModelConfig& model);

struct GemmChoice {
  std::string mode;         // runtime.gemm
  GemmSelection selection;  // install with GemmSelectionScope
  std::string backend;      // blas, portable, cublas, or mixed (auto chose per class)
  std::string line;         // one line for the banner and /run: the mode, the choice and the rates
  int portable_classes = 0, classes = 0;
};

// runtime.gemm (auto | blas | portable). auto: times BLAS and the portable kernel at every class with
// `rows` token rows (best of 3 after a warm-up), sums each over ranks and takes the faster; a process
// measures once and reuses its choice (same plans and losses for every run in it) while every rank holds
// the same. On CUDA: cuBLAS whatever the mode. Collective over world.
GemmChoice choose_gemm(const std::string& mode, const std::vector<GemmShapeClass>& classes, int rows,
                       GemmPrecision precision, const World& world);

// A selection as text ("fwd 64x192=blas;dgrad 64x192=portable;..."), and back as a choice that says it
// came from `source`; text that does not parse throws std::invalid_argument.
std::string encode_gemm_selection(const GemmSelection& selection);
GemmChoice decode_gemm_selection(const std::string& text, const std::string& source);

// One line when the BLAS is OpenBLAS on a generic core (Prescott, Nehalem, ...) while the CPU has
// AVX-512 or AVX2 (what to set, and what auto measured); empty otherwise. core: openblas_get_corename().
std::string generic_blas_warning(const std::string& core, const std::string& config, bool avx512, bool avx2,
                                 const GemmChoice& choice);

// One line when the BLAS's own thread pool (blas_has_own_thread_pool) is asked for more threads
// (runtime.blas_threads) than the cores this rank's main thread may run on (its affinity, e.g. OpenMP's
// OMP_PROC_BIND binding it to one place): the pool inherits that mask and its threads share those cores.
// Empty otherwise.
std::string blas_affinity_warning(int blas_threads, int cores_allowed, bool own_pool);
// The cores the calling thread may run on (sched_getaffinity); 0 where unknown.
int cores_allowed_to_this_thread();

}  // namespace minimllm
