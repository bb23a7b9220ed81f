// One planned step up to synchronised gradients, stage by stage: StepComms -> StepInputs -> StepOutcome
// (forward and backward, the gradient all-reduce overlapped with it) -> GradientSync::finish. The trainer
// follows it with the optimizer and the metrics; calibration, tests and benchmarks use it alone.
#pragma once

#include "minimllm/data/sampler.hpp"
#include "minimllm/parallel/comm_pool.hpp"
#include "minimllm/step/planned_step.hpp"
#include "minimllm/step/step_executor.hpp"

namespace minimllm {

// Collective over the pool's world. executor: kept from step to step (its exchange workspace); its model
// is the one trained. Afterwards model.grads() and the outcome's loss_sum are the world's,
// identical on every rank (with the distributed optimizer, model.grads() only in the rank's own shard:
// gradient_sync.hpp); outcome.seconds holds data, encoder, boundary, llm, kv_exchange and grad_sync;
// outcome.transfers counts every host<->device copy after the inputs were up, the gradient sync included.
// Under tensor parallelism (the model sharded) also over its group: outcome.flops is the unit's mean.
StepOutcome run_step(const Sampler& sampler, StepExecutor& executor, CommPool& pool,
                     const PlannedStep& planned);

}  // namespace minimllm
