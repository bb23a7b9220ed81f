// Shared driver for Google Benchmark programs that run under MPI: every benchmark is collective, so all
// ranks run the same benchmarks with fixed iteration counts; only rank 0 reports (and writes
// --benchmark_out). MPI and Kokkos live for the whole run.
#pragma once

#include <functional>
#include <string>

namespace minimllm {

// register_dynamic runs after MPI and Kokkos start (for benchmarks whose arguments depend on the world).
int run_mpi_benchmarks(int argc, char** argv, const std::function<void()>& register_dynamic = {});

// The decks' folder: $MINIMLLM_INPUTS when set (a build carried to another machine), else the source tree's
// inputs/.
std::string benchmark_inputs_dir();

}  // namespace minimllm
