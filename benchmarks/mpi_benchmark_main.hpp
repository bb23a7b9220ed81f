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

// Repetitions of a benchmark's timed loop: $MINIMLLM_BENCH_REPS when set (at least 1), else fallback.
int benchmark_repetitions(int fallback);

// The largest value over MPI_COMM_WORLD (a step's time is its slowest rank's).
double max_over_ranks(double value);

}  // namespace minimllm
