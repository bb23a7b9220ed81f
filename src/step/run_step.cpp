#include "minimllm/step/run_step.hpp"

#include <algorithm>
#include <vector>

#include "minimllm/step/gradient_sync.hpp"
#include "minimllm/step/step_comms.hpp"
#include "minimllm/step/step_inputs.hpp"

namespace minimllm {
namespace {

// A unit whose ranks are at several stages (a data world sees one of them): every rank takes the unit's
// view. FLOPs: its mean (as under tensor parallelism); the loss: the last stage's; each phase and the rows:
// its slowest or fullest stage's, but the pipeline phase and the bubble over the LLM's stages (the
// encoder's own stage runs no 1F1B schedule): over the longest stage's 1F1B span, the share its stages
// idle on average. As 1F1B's ideal (p - 1) / (m + p - 1), that counts a stage's idle time at the start and
// the end of the schedule, where the stage's own span may not reach.
void unit_over_its_stages(const PipelineStage& stage, StepOutcome& outcome) {
  Communicator& stages = *stage.comm;
  outcome.flops = stages.allreduce_sum(outcome.flops) / stages.size();
  outcome.loss_sum = stages.allreduce_sum(outcome.loss_sum);
  const bool llm = stage.stage >= 0;
  const double wait = llm ? outcome.seconds[Phase::pipeline] : 0.0;
  const double busy = llm ? outcome.pipeline_busy_seconds : 0.0;
  const double mean_busy = stages.allreduce_sum(busy) / stage.stages;
  const double mean_wait = stages.allreduce_sum(wait) / stage.stages;
  std::vector<double> most(outcome.seconds.seconds.begin(), outcome.seconds.seconds.end());
  most.insert(most.end(), {outcome.pipeline_span_seconds, static_cast<double>(outcome.llm_rows),
                           static_cast<double>(outcome.encoder_rows), outcome.ideal_bubble});
  stages.allreduce_max(most);
  std::copy_n(most.begin(), kPhaseCount, outcome.seconds.seconds.begin());
  outcome.pipeline_span_seconds = most[kPhaseCount];
  outcome.llm_rows = static_cast<std::int64_t>(most[kPhaseCount + 1]);
  outcome.encoder_rows = static_cast<std::int64_t>(most[kPhaseCount + 2]);
  outcome.ideal_bubble = most[kPhaseCount + 3];
  outcome.seconds[Phase::pipeline] = mean_wait;
  outcome.pipeline_bubble =
      outcome.pipeline_span_seconds > 0.0 ? 1.0 - mean_busy / outcome.pipeline_span_seconds : 0.0;
}

}  // namespace

StepOutcome run_step(const Sampler& sampler, StepExecutor& executor, CommPool& pool,
                     const PlannedStep& planned) {
  Model& model = executor.model();
  PhaseTimes data;
  PhaseClock clock(data, Phase::data);
  const StepComms comms = acquire_step_comms(pool, planned.plan);
  StepInputs inputs = upload_step_inputs(sampler, planned, comms, model.config().llm.width,
                                         model.attention_shape(), model.cp_comm(), executor.encoder_groups());
  clock.stop();
  const TransferCounts inputs_up = transfer_counts();
  GradientSync& sync = executor.gradient_sync();
  sync.begin(*comms.gradients);
  StepOutcome outcome = executor.run(planned.work, inputs, planned.plan.placement);
  sync.finish(model, *comms.world, outcome);
  // A unit's ranks share its FLOPs unevenly (encoder groups with different images, pipeline stages with
  // different layers): each counts the unit's mean, so that a data world's sum times the unit's ranks is
  // the whole world's (reduce_step_metrics).
  const TensorParallel& tp = model.sharding().llm;
  if (tp.size > 1) outcome.flops = tp.comm->allreduce_sum(outcome.flops) / tp.size;
  outcome.seconds += data;
  outcome.input_transfers = inputs.transfers;
  outcome.movement_bytes = inputs.movement_bytes;
  outcome.movement_seconds = inputs.movement_seconds;
  outcome.transfers = transfer_counts() - inputs_up;
  if (model.sharding().pipeline.comm) unit_over_its_stages(model.sharding().pipeline, outcome);
  return outcome;
}

}  // namespace minimllm
