#include "minimllm/core/phase.hpp"

#include <Kokkos_Core.hpp>

#include "minimllm/core/clock.hpp"
#include "minimllm/core/watchdog.hpp"

namespace minimllm {

void PhaseClock::enter(Phase phase) {
  stop();
  heartbeat(phase_name(phase));  // progress, for the stall watchdog (core/watchdog.hpp)
  Kokkos::Profiling::pushRegion(std::string("minimllm::") + phase_name(phase));
  current_ = phase, running_ = true;
  started_ = now_seconds();
}

void PhaseClock::stop() {
  if (!running_) return;
  into_[current_] += now_seconds() - started_;
  Kokkos::Profiling::popRegion();
  running_ = false;
}

}  // namespace minimllm
