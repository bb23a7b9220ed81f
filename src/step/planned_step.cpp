#include "minimllm/step/planned_step.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "minimllm/config/input_error.hpp"
#include "minimllm/core/agreement.hpp"
#include "minimllm/core/clock.hpp"

namespace minimllm {

PlannedStep planned_step(GlobalBatch batch, StepPlan plan, int rank, int world_size,
                         EncoderSchedule schedule) {
  PlannedStep planned;
  planned.step = batch.step;
  planned.work = derive_rank_work(plan, batch, rank, world_size, schedule);
  planned.batch = std::move(batch), planned.plan = std::move(plan);
  return planned;
}

}  // namespace minimllm
