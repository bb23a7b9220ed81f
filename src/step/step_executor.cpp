#include "minimllm/step/step_executor.hpp"

#include <numeric>
#include <string>
#include <vector>

#include "minimllm/core/clock.hpp"
#include "minimllm/core/phase.hpp"
#include "minimllm/core/watchdog.hpp"
#include "minimllm/step/pipeline_schedule.hpp"

namespace minimllm {
namespace {

std::size_t total_rows(const std::vector<std::size_t>& group_rows) {
  return std::accumulate(group_rows.begin(), group_rows.end(), std::size_t(0));
}

}  // namespace

t_mat StepExecutor::unit_embeddings(const StepInputs& inputs, size_t i, const t_mat& own) const {
  if (inputs.encoder_group_rows.empty()) return own;
  const std::vector<std::size_t>& rows = inputs.encoder_group_rows[i];
  const std::size_t width = own.extent(1);
  const t_mat all(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("boundary::unit_embeddings")),
                  total_rows(rows), width);
  std::vector<std::size_t> floats;
  for (std::size_t r : rows) floats.push_back(r * width);
  encoder_groups_.comm->allgatherv(own.data(), own.size(), all.data(), floats);
  return all;
}

void StepExecutor::encoder_backward(const StepInputs& inputs, size_t i, const EncoderActivations& acts,
                                    const t_mat& d_unit_embeddings, bool last, GradientListener* ready) {
  if (inputs.encoder_group_rows.empty())
    return model_.encoder_backward(inputs.encoder[i], acts, d_unit_embeddings, ready);
  const std::vector<std::size_t>& rows = inputs.encoder_group_rows[i];
  const auto first =
      static_cast<int>(std::accumulate(rows.begin(), rows.begin() + encoder_groups_.rank, std::size_t(0)));
  const t_mat d_own = Kokkos::subview(
      d_unit_embeddings, std::make_pair(first, first + static_cast<int>(rows[encoder_groups_.rank])),
      Kokkos::ALL());
  model_.encoder_backward(inputs.encoder[i], acts, d_own, nullptr);
  if (!last) return;
  // Each group's gradients are of its own images: their sum is the unit's, as one group would have it.
  const std::vector<GradientUnit>& units = model_.gradient_units();
  for (size_t u = model_.llm_gradient_units(); u < units.size(); ++u)
    for (const TensorRange& t : units[u].tensors)
      encoder_groups_.comm->allreduce_sum(model_.grads().data() + t.offset, t.count);
  if (ready)
    for (size_t u = model_.llm_gradient_units(); u < units.size(); ++u)
      ready->gradients_ready(static_cast<int>(u));
}

StepOutcome StepExecutor::run(const RankWork& work, StepInputs& inputs, Placement placement) {
  StepOutcome out;
  {
    PhaseClock clock(out.seconds, Phase::data);
    model_.zero_grads();
  }
  if (placement == Placement::disaggregated) {
    run_pipeline(work, inputs, out);
  } else if (!work.stages.empty()) {
    run_per_micro_batch(work, inputs, out);
  } else {
    run_phases(work, inputs, out);
  }
  return out;
}

void StepExecutor::run_micro_batch(StepInputs& inputs, size_t m, const t_mat& received,
                                   const t_mat& d_received, StepOutcome& out) {
  const LlmInput& llm = inputs.llm[m];
  // The loss sum comes back to the host: one counted 8-byte copy per micro-batch.
  out.loss_sum += model_.llm_forward_backward(llm, received, inputs.grad_scale, d_received,
                                              inputs.kv[m].get(), listener_for(m, inputs.llm.size()));
  finish_micro_batch(inputs, m, out);
}

void StepExecutor::finish_micro_batch(StepInputs& inputs, size_t m, StepOutcome& out) {
  if (inputs.kv[m]) {
    out.seconds[Phase::kv_exchange] += inputs.kv[m]->seconds();
    inputs.kv[m].reset();  // frees its row lists before the next micro-batch
  }
  out.flops += model_.llm_flops(inputs.llm[m]);
  out.llm_rows += inputs.llm[m].tokens;
}

void StepExecutor::report_llm_done_if_idle(const StepInputs& inputs) {
  GradientListener* ready = sync_.listener();
  if (!ready || !inputs.llm.empty()) return;
  for (int u = 0; u < model_.llm_gradient_units(); ++u) ready->gradients_ready(u);
}

void StepExecutor::run_llm(StepInputs& inputs, const t_mat& received, const t_mat& d_received,
                           StepOutcome& out, PhaseClock& clock) {
  report_llm_done_if_idle(inputs);
  if (model_.sharding().pipeline.stages > 1) return run_one_f_one_b(inputs, received, d_received, out, clock);
  for (size_t m = 0; m < inputs.llm.size(); ++m) run_micro_batch(inputs, m, received, d_received, out);
}

// Activations go to the next stage and gradients to the previous one in micro-batch order, so one tag per
// direction keeps them apart (messages of one source, destination and tag match in order).
void StepExecutor::run_one_f_one_b(StepInputs& inputs, const t_mat& received, const t_mat& d_received,
                                   StepOutcome& out, PhaseClock& clock) {
  constexpr int kForwardTag = 0, kBackwardTag = 1;
  const PipelineStage& stage = model_.sharding().pipeline;
  Communicator& stages = *stage.comm;
  const int width = model_.config().llm.width;
  const size_t count = inputs.llm.size();
  std::vector<LlmStageActivations> acts(count);
  std::vector<t_mat> d_in(count);  // the gradients sent back, alive until their sends finish
  std::vector<std::unique_ptr<CommRequest>> forward_sends(count), backward_sends;
  const auto receive = [&](std::size_t rows, int peer, int tag) {
    clock.enter(Phase::pipeline);
    heartbeat_waiting_for("pipeline", stages.world_ranks().at(peer));
    t_mat rows_in(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("pipeline::received")), rows,
                  width);
    stages.irecv(rows_in.data(), rows_in.size(), peer, tag)->wait();
    clock.enter(Phase::llm);
    return rows_in;
  };
  step_fence();
  const double start = host_seconds(), waited_before = out.seconds[Phase::pipeline];
  for (const PipelineOp& op : one_f_one_b(stage.stage, stage.stages, static_cast<int>(count))) {
    const auto m = static_cast<size_t>(op.micro_batch);
    const LlmInput& llm = inputs.llm[m];
    ContextAttention* kv = inputs.kv[m].get();
    const auto rows = static_cast<std::size_t>(llm.tokens);
    if (op.forward) {
      const t_mat x_in =
          stage.first() ? t_mat() : receive(rows, stage.group_rank(stage.stage - 1), kForwardTag);
      model_.llm_stage_forward(llm, received, x_in, inputs.grad_scale, kv, acts[m]);
      out.loss_sum += acts[m].loss_sum;  // the last stage's
      if (!stage.last())
        forward_sends[m] = stages.isend(acts[m].x_out.data(), acts[m].x_out.size(),
                                        stage.group_rank(stage.stage + 1), kForwardTag);
      continue;
    }
    const t_mat d_out =
        stage.last() ? t_mat() : receive(rows, stage.group_rank(stage.stage + 1), kBackwardTag);
    if (!stage.first())
      d_in[m] =
          t_mat(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("pipeline::d_in")), rows, width);
    model_.llm_stage_backward(llm, acts[m], d_out, d_in[m], d_received, kv, listener_for(m, count));
    if (!stage.first())
      backward_sends.push_back(
          stages.isend(d_in[m].data(), d_in[m].size(), stage.group_rank(stage.stage - 1), kBackwardTag));
    // The next stage has received x_out (its gradient came back), but the send must finish before the
    // buffer goes.
    if (forward_sends[m]) forward_sends[m]->wait();
    acts[m] = LlmStageActivations();
    finish_micro_batch(inputs, m, out);
  }
  clock.enter(Phase::pipeline);
  for (const std::unique_ptr<CommRequest>& send : backward_sends) send->wait();
  clock.enter(Phase::llm);
  out.pipeline_span_seconds = host_seconds() - start;
  out.pipeline_busy_seconds = out.pipeline_span_seconds - (out.seconds[Phase::pipeline] - waited_before);
  out.ideal_bubble = ideal_bubble(stage.stages, static_cast<int>(count));
}

// The encoder's own stage and the LLM's first: the unit's image rows (what the boundary exchange delivered
// to it) go from one to the other and their gradients come back, on tags the 1F1B messages do not use.
constexpr int kImageRowsTag = 2, kImageGradientsTag = 3;

// Colocated plans: encoder forward | boundary all-to-all | LLM micro-batches | all-to-all back | encoder
// backward, each phase on every rank. Under pipeline parallelism only the stage holding the encoder runs
// the encoder and the boundary exchange (every rank of a data world is at the same stage); with the encoder
// as its own stage (run_encoder_stage) the LLM's first stage receives the image rows from it.
void StepExecutor::run_phases(const RankWork& work, StepInputs& inputs, StepOutcome& out) {
  const int width = model_.config().llm.width;
  const PipelineStage& stage = model_.sharding().pipeline;
  if (stage.stage < 0) return run_encoder_stage(work, inputs, out);
  if (!stage.holds_encoder()) {
    PhaseClock clock(out.seconds, Phase::llm);
    if (!stage.first()) {
      const t_mat none("boundary::received", 0, width);
      return run_llm(inputs, none, none, out, clock);
    }
    Communicator& stages = *stage.comm;
    const int encoder = stage.group_rank(-1);
    clock.enter(Phase::pipeline);
    heartbeat_waiting_for("pipeline", stages.world_ranks().at(encoder));
    t_mat received("boundary::received", work.received_rows, width);
    stages.irecv(received.data(), received.size(), encoder, kImageRowsTag)->wait();
    clock.enter(Phase::llm);
    t_mat d_received("boundary::d_received", work.received_rows, width);
    run_llm(inputs, received, d_received, out, clock);
    clock.enter(Phase::pipeline);
    stages.isend(d_received.data(), d_received.size(), encoder, kImageGradientsTag)->wait();
    return;
  }
  PhaseClock clock(out.seconds, Phase::encoder);
  EncodedImages images = encode(work, inputs, out, clock);
  clock.enter(Phase::llm);
  t_mat d_received("boundary::d_received", work.received_rows, width);
  run_llm(inputs, images.received, d_received, out, clock);
  encoder_backward_from(inputs, images, d_received, out, clock);
}

StepExecutor::EncodedImages StepExecutor::encode(const RankWork& work, StepInputs& inputs, StepOutcome& out,
                                                 PhaseClock& clock) {
  EncodedImages images;
  model_.encoder_forward(inputs.encoder.at(0), images.acts);
  clock.enter(Phase::boundary);
  out.encoder_forward_seconds = out.seconds[Phase::encoder];
  images.received = t_mat("boundary::received", work.received_rows, model_.config().llm.width);
  images.embeddings = unit_embeddings(inputs, 0, images.acts.embeddings);
  const WorkspaceScope exchange_scope(exchange_workspace_);
  inputs.boundary.at(0)->forward(images.embeddings, images.received);
  return images;
}

void StepExecutor::encoder_backward_from(StepInputs& inputs, const EncodedImages& images,
                                         const t_mat& d_received, StepOutcome& out, PhaseClock& clock) {
  clock.enter(Phase::boundary);
  BoundaryExchange& boundary = *inputs.boundary.at(0);
  t_mat d_embeddings("boundary::d_embeddings", images.embeddings.extent(0), model_.config().llm.width);
  {
    const WorkspaceScope exchange_scope(exchange_workspace_);
    boundary.backward(d_received, d_embeddings);
  }
  clock.enter(Phase::encoder);
  const EncoderInput& encoder_input = inputs.encoder.at(0);
  encoder_backward(inputs, 0, images.acts, d_embeddings, true, sync_.listener());
  out.flops += model_.encoder_flops(encoder_input);
  out.encoder_rows = encoder_input.patches;
  clock.stop();
  out.boundary_bytes = 2 * boundary.bytes_sent();
}

// The encoder's own stage (parallel.encoder_stage): the encoder and the boundary exchange as in run_phases,
// the unit's image rows to the LLM's first stage, its wait for their gradients, the encoder's backward.
void StepExecutor::run_encoder_stage(const RankWork& work, StepInputs& inputs, StepOutcome& out) {
  const PipelineStage& stage = model_.sharding().pipeline;
  Communicator& stages = *stage.comm;
  PhaseClock clock(out.seconds, Phase::encoder);
  const EncodedImages images = encode(work, inputs, out, clock);
  clock.enter(Phase::pipeline);
  const int llm = stage.group_rank(0);
  heartbeat_waiting_for("pipeline", stages.world_ranks().at(llm));
  t_mat d_received("boundary::d_received", work.received_rows, model_.config().llm.width);
  const std::unique_ptr<CommRequest> gradients =
      stages.irecv(d_received.data(), d_received.size(), llm, kImageGradientsTag);
  stages.isend(images.received.data(), images.received.size(), llm, kImageRowsTag)->wait();
  gradients->wait();
  encoder_backward_from(inputs, images, d_received, out, clock);
}

// Disaggregated plans (DistTrain): a dataflow pipeline over stages (pipeline_stage in rank_work.hpp), with
// point-to-point transfers so that no rank waits for ranks it exchanges nothing with. Encoder ranks encode
// stage after stage (the last stage first, forward_stage) and send each stage's rows as soon as they
// exist, then run the backward of each stage, in stage order, as its gradients come back. LLM ranks run
// their micro-batches in order, each once its rows have arrived, and send its gradients straight back. The
// arithmetic is the colocated path's: each image is encoded once, each micro-batch runs once, gradients
// accumulate (encoder backward in a fixed stage order, so the result does not depend on timing).
void StepExecutor::run_pipeline(const RankWork& work, StepInputs& inputs, StepOutcome& out) {
  const int width = model_.config().llm.width;
  const int stages = static_cast<int>(work.stages.size());
  std::vector<std::unique_ptr<BoundaryExchange>>& exchanges = inputs.boundary;
  // The exchanges' packed rows, from posting the receives to finishing the sends.
  const WorkspaceScope exchange_scope(exchange_workspace_);
  PhaseClock clock(out.seconds, Phase::data);
  t_mat received("boundary::received", work.received_rows, width);
  t_mat d_received("boundary::d_received", work.received_rows, width);
  std::vector<t_mat> d_embeddings = post_stage_receives(inputs);

  // Encoder side: every forward, sending each stage's rows at once.
  std::vector<EncoderActivations> encoder_acts(stages);
  for (int position = 0; position < stages; ++position) {
    const int m = forward_stage(position, stages);
    clock.enter(Phase::encoder);
    model_.encoder_forward(inputs.encoder[m], encoder_acts[m]);
    clock.enter(Phase::boundary);
    exchanges[m]->start_forward_sends(unit_embeddings(inputs, m, encoder_acts[m].embeddings), received);
  }

  // LLM side: micro-batches in order as their rows arrive; gradients straight back.
  report_llm_done_if_idle(inputs);
  for (size_t j = 0; j < inputs.llm.size(); ++j) {
    const MicroBatchWork& mb = work.micro_batches[j];
    clock.enter(Phase::boundary);
    exchanges[mb.stage]->finish_forward_receives(received);
    clock.enter(Phase::llm);
    run_micro_batch(inputs, j, received, d_received, out);
    clock.enter(Phase::boundary);
    exchanges[mb.stage]->start_backward_sends(d_received, d_embeddings[mb.stage]);
  }

  // Encoder side: each stage's backward once its gradients are back, in stage order.
  for (int m = 0; m < stages; ++m) {
    stage_encoder_backward(inputs, m, encoder_acts[m], d_embeddings[m], received, out, clock);
    encoder_acts[m] = EncoderActivations();
  }
  finish_stage_sends(inputs, out, clock);
}

// Colocated plans with the encoder per micro-batch (EncoderSchedule::per_micro_batch): stage after stage,
// every rank encodes the stage's items and sends their rows, runs its micro-batch of the stage as its rows
// arrive and sends their gradients back, then runs the stage's encoder backward once its rows' gradients
// are back. One stage's encoder activations live at a time, and each encoder GEMM covers one stage's
// rows. No rank waits on a later stage of another: a stage's rows depend only on that stage's forwards,
// which every rank runs before it waits on anything of the stage. The arithmetic is the per-step
// schedule's, the encoder's weight gradients summed stage by stage.
void StepExecutor::run_per_micro_batch(const RankWork& work, StepInputs& inputs, StepOutcome& out) {
  const int width = model_.config().llm.width;
  const int stages = static_cast<int>(work.stages.size());
  const WorkspaceScope exchange_scope(exchange_workspace_);
  PhaseClock clock(out.seconds, Phase::data);
  t_mat received("boundary::received", work.received_rows, width);
  t_mat d_received("boundary::d_received", work.received_rows, width);
  std::vector<t_mat> d_embeddings = post_stage_receives(inputs);
  report_llm_done_if_idle(inputs);
  size_t j = 0;  // this rank's next micro-batch
  for (int m = 0; m < stages; ++m) {
    BoundaryExchange& exchange = *inputs.boundary[m];
    EncoderActivations acts;
    clock.enter(Phase::encoder);
    model_.encoder_forward(inputs.encoder[m], acts);
    clock.enter(Phase::boundary);
    exchange.start_forward_sends(unit_embeddings(inputs, m, acts.embeddings), received);
    for (; j < inputs.llm.size() && work.micro_batches[j].stage == m; ++j) {
      exchange.finish_forward_receives(received);
      clock.enter(Phase::llm);
      run_micro_batch(inputs, j, received, d_received, out);
      clock.enter(Phase::boundary);
      exchange.start_backward_sends(d_received, d_embeddings[m]);
    }
    stage_encoder_backward(inputs, m, acts, d_embeddings[m], received, out, clock);
  }
  finish_stage_sends(inputs, out, clock);
}

std::vector<t_mat> StepExecutor::post_stage_receives(StepInputs& inputs) const {
  std::vector<t_mat> d_embeddings;
  for (size_t m = 0; m < inputs.boundary.size(); ++m) {
    d_embeddings.emplace_back("boundary::d_embeddings",
                              inputs.encoder_group_rows.empty() ? inputs.encoder[m].patches
                                                                : total_rows(inputs.encoder_group_rows[m]),
                              model_.config().llm.width);
    inputs.boundary[m]->post_forward_receives();
    inputs.boundary[m]->post_backward_receives();
  }
  return d_embeddings;
}

void StepExecutor::stage_encoder_backward(StepInputs& inputs, int m, const EncoderActivations& acts,
                                          const t_mat& d_embeddings, const t_mat& received, StepOutcome& out,
                                          PhaseClock& clock) {
  const auto stages = inputs.boundary.size();
  BoundaryExchange& exchange = *inputs.boundary[m];
  clock.enter(Phase::boundary);
  exchange.finish_forward_receives(received);  // no-op unless a stage's rows came to no micro-batch
  exchange.finish_backward_receives(d_embeddings);
  clock.enter(Phase::encoder);
  encoder_backward(inputs, m, acts, d_embeddings, m + 1 == static_cast<int>(stages),
                   listener_for(static_cast<size_t>(m), stages));
  out.flops += model_.encoder_flops(inputs.encoder[m]);
  out.encoder_rows += inputs.encoder[m].patches;
}

void StepExecutor::finish_stage_sends(StepInputs& inputs, StepOutcome& out, PhaseClock& clock) {
  clock.enter(Phase::boundary);
  for (const std::unique_ptr<BoundaryExchange>& exchange : inputs.boundary) {
    exchange->finish_sends();
    out.boundary_bytes += 2 * exchange->bytes_sent();
  }
  inputs.boundary.clear();  // their packed rows live in the caller's exchange scope, which closes after
}

}  // namespace minimllm
