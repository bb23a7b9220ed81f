// StepExecutor: the forward and backward pass of one rank's part of a step — encoder on the encoder
// layout, boundary exchange, LLM (context parallel inside each group, micro-batch by micro-batch) on the
// LLM layout, boundary exchange back, encoder backward. Under pipeline parallelism the encoder and the
// boundary exchange run on the stage holding the encoder (the LLM's first, or the encoder's own before
// it), and the micro-batches go through the LLM's stages 1F1B. Colocated plans
// run these as phases on every rank; disaggregated plans as a pipeline over micro-batches between the encoder
// ranks and the LLM ranks. Leaves this rank's gradient in the model; its GradientSync sums them over ranks,
// started during the backward of the step's last micro-batch when overlapping (gradient_sync.hpp).
#pragma once

#include <cstdint>

#include "minimllm/core/phase.hpp"
#include "minimllm/core/transfer.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/step/gradient_sync.hpp"
#include "minimllm/step/step_inputs.hpp"

namespace minimllm {

struct StepOutcome {
  double loss_sum = 0.0;   // sum of per-target losses: this rank's, then the world's once synchronised
  double grad_norm = 0.0;  // L2 norm of the synchronised gradient (set by GradientSync::finish)
  double flops = 0.0;      // model FLOPs of this rank
  // This rank's phase times (fenced). Pipelines: boundary includes waiting for rows or gradients.
  PhaseTimes seconds;
  // Of seconds[encoder], the forward (colocated plans: what calibrate measures the forward's share from).
  double encoder_forward_seconds = 0.0;
  std::int64_t boundary_bytes = 0;              // sent by this rank, both directions
  std::int64_t movement_bytes = 0;              // raw sample bytes this rank received from other loaders
  double movement_seconds = 0.0;                // of seconds[data]: generating and moving the raw samples
  std::int64_t llm_rows = 0, encoder_rows = 0;  // work assigned to this rank
  // Pipeline parallelism (0 without stages): the wall time of this rank's 1F1B schedule (its first to its
  // last operation, the final sends included) and of it the time not waiting on the neighbouring stages
  // (seconds[pipeline] also holds waits outside the schedule: the LLM's first stage's for the encoder's own
  // stage); the ideal 1F1B bubble (p - 1) / (m + p - 1) for the m micro-batches it ran. run_step makes
  // them the unit's: the span the longest of its stages', the wait their mean, and pipeline_bubble the
  // share of the span a stage idles on average, 1 - (mean busy time) / span.
  double pipeline_span_seconds = 0.0;
  double pipeline_busy_seconds = 0.0;
  double ideal_bubble = 0.0;
  double pipeline_bubble = 0.0;
  // Host<->device copies of this rank (none on host backends). input_transfers: the step's inputs
  // (StepInputs), before any compute. transfers: everything after that, compute and communication; zero
  // on the device path with NCCL collectives for colocated plans, and the MPI backend's host staging
  // otherwise (disaggregated pipelines send their rows point to point through MPI, staged through host
  // memory on a device), besides each micro-batch's loss sum: one counted 8-byte copy back to the host.
  TransferCounts input_transfers;
  TransferCounts transfers;
};

class StepExecutor {
 public:
  // encoder_groups: the unit's shared encoder groups (RankGrid::encoder_groups; one by default).
  explicit StepExecutor(Model& model, GradSyncOptions sync = {}, const TensorParallel& encoder_groups = {})
      : model_(model), sync_(model, sync), encoder_groups_(encoder_groups) {}

  Model& model() { return model_; }
  // The step's gradient all-reduce (run_step: begin before run, finish after). Between the two, run()
  // has the backward of the last micro-batch (and of the encoder) report each finished unit to it.
  GradientSync& gradient_sync() { return sync_; }
  const TensorParallel& encoder_groups() const { return encoder_groups_; }

  // Computes this rank's share of the gradient of the global mean loss into model.grads() (zeroed
  // first). The inputs' exchanges are consumed (a pipeline's are destroyed before it returns). Collective
  // over the ranks the plan makes exchange. Counts no transfers itself (run_step does).
  StepOutcome run(const RankWork& work, StepInputs& inputs, Placement placement);

 private:
  void run_phases(const RankWork& work, StepInputs& inputs, StepOutcome& out);
  void run_pipeline(const RankWork& work, StepInputs& inputs, StepOutcome& out);
  void run_encoder_stage(const RankWork& work, StepInputs& inputs, StepOutcome& out);
  void run_per_micro_batch(const RankWork& work, StepInputs& inputs, StepOutcome& out);
  // Staged plans (run_pipeline, run_per_micro_batch): each stage's embedding gradients allocated and its
  // exchange's receives posted; a stage's encoder backward once its rows' gradients are back (its FLOPs
  // and rows counted); every exchange's sends finished and its bytes counted.
  std::vector<t_mat> post_stage_receives(StepInputs& inputs) const;
  void stage_encoder_backward(StepInputs& inputs, int m, const EncoderActivations& acts,
                              const t_mat& d_embeddings, const t_mat& received, StepOutcome& out,
                              PhaseClock& clock);
  void finish_stage_sends(StepInputs& inputs, StepOutcome& out, PhaseClock& clock);
  // The encoder's forward and the boundary exchange (colocated plans): the unit's image rows in
  // `received` (clock: in Phase::encoder, left in Phase::boundary); and back, from their gradients, to the
  // encoder's backward (the boundary exchange's bytes, the encoder's FLOPs and rows into out).
  struct EncodedImages {
    EncoderActivations acts;
    t_mat embeddings, received;
  };
  EncodedImages encode(const RankWork& work, StepInputs& inputs, StepOutcome& out, PhaseClock& clock);
  void encoder_backward_from(StepInputs& inputs, const EncodedImages& images, const t_mat& d_received,
                             StepOutcome& out, PhaseClock& clock);
  // One micro-batch's LLM forward and backward, its K/V exchange freed after it.
  // ready: the gradient listener, for the step's last micro-batch only.
  void run_micro_batch(StepInputs& inputs, size_t m, const t_mat& received, const t_mat& d_received,
                       StepOutcome& out);
  // After micro-batch m's backward: its K/V exchange's time counted and the exchange freed, its FLOPs and
  // rows counted.
  void finish_micro_batch(StepInputs& inputs, size_t m, StepOutcome& out);
  // Every LLM micro-batch of the step: one after the other, or under pipeline parallelism this rank's
  // stage of them in the 1F1B order (step/pipeline_schedule.hpp), activations forward to the next stage and
  // their gradients back to the previous one, point to point. clock: the caller's, in Phase::llm.
  void run_llm(StepInputs& inputs, const t_mat& received, const t_mat& d_received, StepOutcome& out,
               PhaseClock& clock);
  void run_one_f_one_b(StepInputs& inputs, const t_mat& received, const t_mat& d_received, StepOutcome& out,
                       PhaseClock& clock);
  // The listener for micro-batch m of `count` (null before the last: its gradients are still growing).
  GradientListener* listener_for(size_t m, size_t count) {
    return m + 1 == count ? sync_.listener() : nullptr;
  }
  // A rank with no LLM micro-batch has its LLM gradients (zero) done at once.
  void report_llm_done_if_idle(const StepInputs& inputs);
  // Encoder input i's embeddings for the whole unit: this rank's own, or with shared encoder groups every
  // group's rows all-gathered in image order.
  t_mat unit_embeddings(const StepInputs& inputs, size_t i, const t_mat& own) const;
  // Encoder input i's backward from the unit's d_embeddings (with shared groups: this group's rows). After
  // the step's last encoder backward (`last`), shared groups sum the encoder's gradients over the groups
  // and only then tell `ready` of the encoder's units.
  void encoder_backward(const StepInputs& inputs, size_t i, const EncoderActivations& acts,
                        const t_mat& d_unit_embeddings, bool last, GradientListener* ready);

  Model& model_;
  GradientSync sync_;
  TensorParallel encoder_groups_;
  // The boundary exchanges' packed rows (BoundaryExchange takes them from the active workspace), reused
  // from step to step; the model's passes switch to the model's own workspace.
  Workspace exchange_workspace_;
};

}  // namespace minimllm
