#include "minimllm/core/phase.hpp"

#include <Kokkos_Core.hpp>
#include <exception>

#include "minimllm/core/clock.hpp"
#include "minimllm/core/watchdog.hpp"

namespace minimllm {

void PhaseClock::enter(Phase phase) {
  const double now = now_seconds();  // one fence ends the current phase and starts the next
  if (running_) {
    into_[current_] += now - started_;
    Kokkos::Profiling::popRegion();
  }
  heartbeat(phase_name(phase));  // progress, for the stall watchdog (core/watchdog.hpp)
  Kokkos::Profiling::pushRegion(std::string("minimllm::") + phase_name(phase));
  current_ = phase, running_ = true;
  started_ = now;
}

void PhaseClock::stop() {
  if (!running_) return;
  running_ = false;
  // While an exception unwinds, only the region is closed: no fence (which may itself throw on a
  // device error) and no time for a phase that did not finish.
  if (std::uncaught_exceptions() == 0) into_[current_] += now_seconds() - started_;
  Kokkos::Profiling::popRegion();
}

}  // namespace minimllm
