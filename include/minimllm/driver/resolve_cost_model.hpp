// The cost model a run or a simulation plans with, built the same way for both (a prediction cannot drift
// from the run it predicts): the compute and measured links of the chosen calibration or of the model's
// FLOPs (CostModelChoice, driver/calibrate.hpp), the resolved machine's links and creation time over them
// (driver/machine.hpp), the memory model and the machine's memory per rank, then the tensor x pipeline
// grid's unit terms.
#pragma once

#include "minimllm/config/run_config.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/driver/machine.hpp"
#include "minimllm/planning/cost_model.hpp"

namespace minimllm {

// The cost model for `ranks` ranks; completes machine's link and creation values and their sources.
CostModel resolve_cost_model(const RunConfig& config, const CostModelChoice& choice, ResolvedMachine& machine,
                             int ranks);

}  // namespace minimllm
