// Shared driver for Google Benchmark programs that run under MPI: every benchmark is collective, so all
// ranks run the same benchmarks with fixed iteration counts; only rank 0 reports (and writes
// --benchmark_out). MPI and Kokkos live for the whole run.
#pragma once

#include <functional>

namespace minimllm {

// register_dynamic runs after MPI and Kokkos start (for benchmarks whose arguments depend on the world).
int run_mpi_benchmarks(int argc, char** argv, const std::function<void()>& register_dynamic = {});

}  // namespace minimllm
