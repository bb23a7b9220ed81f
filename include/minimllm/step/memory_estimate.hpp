// The start-up memory estimate: the largest activation footprint of this rank over a bounded sample of
// planned steps (not every step of a long run), the largest over ranks.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "minimllm/step/planned_step.hpp"

namespace minimllm {

// Steps planned ahead at start-up for the estimate (and then run, not planned again). A later step
// needing more grows the model's workspace between passes (kernels/workspace.hpp).
inline constexpr int kEstimateSteps = 16;

struct PeakWork {
  std::int64_t llm_rows = 0;  // LLM rows of one micro-batch on one rank
  std::int64_t key_rows = 0;  // other members' key rows under context parallelism (Model::activation_bytes)
  std::int64_t patches = 0;   // encoder patches of one rank in one step
};

// Collective over world: the maxima over `steps` and over ranks, key rows as `cp_comm` holds them.
PeakWork peak_work(const std::vector<PlannedStep>& steps, CpComm cp_comm, MPI_Comm world);

}  // namespace minimllm
