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
    // The bubble as the unit's stages' mean (a data world sees one stage): their waits over their spans.
    outcome.seconds[Phase::pipeline] = stages.allreduce_sum(outcome.seconds[Phase::pipeline]) / stage.stages;
    outcome.pipeline_span_seconds = stages.allreduce_sum(outcome.pipeline_span_seconds) / stage.stages;
  }
  outcome.seconds += data;
  outcome.input_transfers = inputs.transfers;
  outcome.movement_bytes = inputs.movement_bytes;
  outcome.movement_seconds = inputs.movement_seconds;
  outcome.transfers = transfer_counts() - inputs_up;
  return outcome;
}

}  // namespace minimllm
