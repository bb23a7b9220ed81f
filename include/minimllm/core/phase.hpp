// The phases of a training step, by name. One table gives each phase its name; the timers, the /steps
// and /ranks columns, the reductions over ranks and the report all iterate it (miniFE's
// cg_times[MATVEC]), so no list of phases is written twice.
#pragma once

#include <array>
#include <string>

namespace minimllm {

// In /steps column order. kv_exchange is part of llm (the context-parallel K/V collectives inside the
// LLM pass); pipeline is waiting on the neighbouring pipeline stages (their activations, gradients and
// the transfers: the bubble); planning includes generating the batch and predicting the plan's time; data
// is communicator look-up, every upload and zeroing the gradients.
enum class Phase { data, encoder, llm, kv_exchange, boundary, pipeline, planning, grad_sync, optimizer };
inline constexpr int kPhaseCount = 9;
inline constexpr std::array<Phase, kPhaseCount> kPhases = {
    Phase::data,     Phase::encoder,  Phase::llm,       Phase::kv_exchange, Phase::boundary,
    Phase::pipeline, Phase::planning, Phase::grad_sync, Phase::optimizer};

inline const char* phase_name(Phase phase) {
  constexpr const char* names[kPhaseCount] = {"data",     "encoder",  "llm",       "kv_exchange", "boundary",
                                              "pipeline", "planning", "grad_sync", "optimizer"};
  return names[static_cast<int>(phase)];
}
// The phase's column in /steps and its table in /ranks, e.g. "encoder_seconds".
inline std::string seconds_column(Phase phase) { return std::string(phase_name(phase)) + "_seconds"; }

// Seconds per phase. A plain array inside, so HDF5 can lay the phases out as consecutive columns.
struct PhaseTimes {
  std::array<double, kPhaseCount> seconds{};

  double& operator[](Phase phase) { return seconds[static_cast<int>(phase)]; }
  double operator[](Phase phase) const { return seconds[static_cast<int>(phase)]; }
  PhaseTimes& operator+=(const PhaseTimes& other) {
    for (int p = 0; p < kPhaseCount; ++p) seconds[p] += other.seconds[p];
    return *this;
  }
};

// Times one phase at a time into a PhaseTimes, fenced at every switch (core/clock.hpp), and marks each
// as a Kokkos Tools region "minimllm::<phase>", so a profiler (space-time stack, NVTX connector) shows a
// step's structure. enter() closes the current phase and opens the next; the destructor (or stop())
// closes the last.
class PhaseClock {
 public:
  explicit PhaseClock(PhaseTimes& into) : into_(into) {}
  PhaseClock(PhaseTimes& into, Phase first) : into_(into) { enter(first); }
  ~PhaseClock() { stop(); }
  PhaseClock(const PhaseClock&) = delete;
  PhaseClock& operator=(const PhaseClock&) = delete;

  void enter(Phase phase);
  void stop();

 private:
  PhaseTimes& into_;
  Phase current_ = Phase::data;
  bool running_ = false;
  double started_ = 0.0;
};

}  // namespace minimllm
