// Memory feasibility at start-up: the run's estimate against the memory this rank can have, before the
// allocations it sizes, so that a deck too large for the machine fails at once with exit 2 (InputError)
// instead of failing in an allocation (or being OOM-killed) later.
#pragma once

#include <string>

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/world.hpp"
#include "minimllm/step/memory_estimate.hpp"

namespace minimllm {

// The memory one rank may use: machine.memory_gib when the deck gives it; else the GPU's free memory
// divided among the ranks that drive that GPU (CUDA), else the node's MemAvailable divided among the
// node's ranks (ranks_per_node). bytes < 0: unknown (then nothing is checked).
struct MemoryBudget {
  double bytes = -1.0;           // per rank
  double shared = -1.0;          // before division
  int sharing = 1;               // ranks it is divided among
  bool device = false;           // a GPU's free memory, else the node's RAM
  bool given = false;            // machine.memory_gib
  double planning_bytes = -1.0;  // the least over ranks: the planners' capacity (the same on every rank)
  std::string source() const;    // "machine.memory_gib", "detected: MemAvailable of the node / 2 ranks"
};

// Collective over world: measured once, before the model allocates.
MemoryBudget memory_budget(const World& world, const MachineConfig& machine);

// What the run will hold per rank: parameters, gradients and AdamW moments (state), and the
// activations and workspace of the largest planned pass (0 before planning).
struct MemoryNeed {
  double parameters = 0.0;  // this rank's (a slice of the model's under tensor parallelism)
  double state_bytes = 0.0;
  double activation_bytes = 0.0;
  PeakWork peak;
  bool planned = false;  // activation_bytes and peak are known
};

// Collective over world. When the need exceeds the budget on any rank, every rank throws InputError with
// one line (the first failing rank's numbers): what is needed and available per rank, the deck keys that
// drive the size and what would fit.
void check_memory_fits(const RunConfig& config, const World& world, const MemoryBudget& budget,
                       const MemoryNeed& need);

// The line check_memory_fits throws (exposed for tests); empty when the need fits.
std::string memory_shortfall(const RunConfig& config, int rank, const MemoryBudget& budget,
                             const MemoryNeed& need);

}  // namespace minimllm
