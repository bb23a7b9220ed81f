#include "minimllm/step/run_step.hpp"

#include "minimllm/step/gradient_sync.hpp"
#include "minimllm/step/step_comms.hpp"
#include "minimllm/step/step_inputs.hpp"

namespace minimllm {

StepOutcome run_step(const Sampler& sampler, StepExecutor& executor, CommPool& pool,
                     const PlannedStep& planned) {
  Model& model = executor.model();
  PhaseTimes data;
  PhaseClock clock(data, Phase::data);
  const StepComms comms = acquire_step_comms(pool, planned.plan);
  StepInputs inputs = upload_step_inputs(sampler, planned, comms, model.config().llm.width,
                                         model.attention_width(), executor.encoder_groups());
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
  const PipelineStage& stage = model.sharding().pipeline;
  if (stage.stages > 1) {
    Communicator& stages = *stage.comm;
    outcome.flops = stages.allreduce_sum(outcome.flops) / stage.stages;
    outcome.loss_sum = stages.allreduce_sum(outcome.loss_sum);  // the last stage's
    // The unit's bubble (a data world sees one stage): over the longest stage's 1F1B span, the share its
    // stages idle on average. As 1F1B's ideal (p - 1) / (m + p - 1), it counts a stage's idle time at the
    // start and the end of the schedule, where the stage's own span may not reach.
    const double busy = outcome.pipeline_span_seconds - outcome.seconds[Phase::pipeline];
    const double mean_busy = stages.allreduce_sum(busy) / stage.stages;
    outcome.seconds[Phase::pipeline] = stages.allreduce_sum(outcome.seconds[Phase::pipeline]) / stage.stages;
    outcome.pipeline_span_seconds = stages.allreduce_max(outcome.pipeline_span_seconds);
    if (outcome.pipeline_span_seconds > 0.0)
      outcome.pipeline_bubble = 1.0 - mean_busy / outcome.pipeline_span_seconds;
  }
  outcome.seconds += data;
  outcome.input_transfers = inputs.transfers;
  outcome.movement_bytes = inputs.movement_bytes;
  outcome.movement_seconds = inputs.movement_seconds;
  outcome.transfers = transfer_counts() - inputs_up;
  return outcome;
}

}  // namespace minimllm
