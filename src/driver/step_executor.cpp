#include "minimllm/driver/step_executor.hpp"

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "minimllm/core/clock.hpp"
#include "minimllm/parallel/boundary_exchange.hpp"
#include "minimllm/parallel/kv_exchange.hpp"
#include "minimllm/plan/rank_work.hpp"

namespace minimllm {
namespace {

std::vector<int> all_ranks(int size) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return ranks;
}

// One K/V exchange per micro-batch when the LLM group has several ranks (none otherwise), built before
// compute so that their row lists go up to the device with the step's inputs (input_transfers).
std::vector<std::unique_ptr<KvExchange>> make_kv_exchanges(const RankWork& work,
                                                           const std::shared_ptr<Communicator>& group_comm,
                                                           int width) {
  std::vector<std::unique_ptr<KvExchange>> kv(work.micro_batches.size());
  if (work.group_ranks.size() > 1) {
    for (size_t m = 0; m < kv.size(); ++m)
      kv[m] = std::make_unique<KvExchange>(group_comm, work.micro_batches[m], 2 * width);
  }
  return kv;
}

}  // namespace

StepExecutor::StepExecutor(const Sampler& sampler, Model& model, const World& world, CommPool& pool)
    : sampler_(sampler),
      model_(model),
      world_(world),
      pool_(pool),
      world_comm_(pool.factory()(world.comm, all_ranks(world.size))) {}

StepOutcome StepExecutor::run(const GlobalBatch& batch, const StepPlan& plan) {
  StepOutcome out;
  const TransferCounts transfers_before = transfer_counts();
  const double t0 = now_seconds();
  const RankWork work =
      derive_rank_work(plan, batch, world_.rank, world_.size, model_.linear_weight_in_attention_pairs());
  std::vector<std::vector<int>> groups;
  for (const LlmGroup& g : plan.llm_groups) groups.push_back(g.ranks);
  const std::shared_ptr<Communicator> group_comm = pool_.acquire_step(groups);
  std::vector<LlmInput> llm_inputs;
  for (const MicroBatchWork& mb : work.micro_batches) llm_inputs.push_back(pack_llm(sampler_, batch, mb));
  // Per-token normalisation over the global batch: every rank knows the global target count.
  const float grad_scale = 1.0f / static_cast<float>(std::max<std::int64_t>(1, batch.loss_targets()));
  model_.zero_grads();
  const double t_data = now_seconds();
  out.data_seconds = t_data - t0;

  if (plan.placement == Placement::disaggregated) {
    run_pipeline(batch, work, llm_inputs, group_comm, grad_scale, transfers_before, out);
  } else {
    run_phases(batch, work, llm_inputs, group_comm, grad_scale, transfers_before, out);
  }

  const double t_sync = now_seconds();
  world_comm_->allreduce_sum(model_.grads().data(), model_.grads().extent(0));
  MPI_Allreduce(MPI_IN_PLACE, &out.loss_sum, 1, MPI_DOUBLE, MPI_SUM, world_.comm);  // a host scalar
  out.grad_sync_seconds = now_seconds() - t_sync;
  // Copies after the inputs were up: (now - before) - (inputs ready - before).
  out.transfers = (transfer_counts() - transfers_before) - out.input_transfers;
  return out;
}

// Colocated plans: encoder forward | boundary all-to-all | LLM micro-batches | all-to-all back | encoder
// backward, each phase on every rank.
void StepExecutor::run_phases(const GlobalBatch& batch, const RankWork& work,
                              const std::vector<LlmInput>& llm_inputs,
                              const std::shared_ptr<Communicator>& group_comm, float grad_scale,
                              const TransferCounts& transfers_before, StepOutcome& out) {
  const int width = model_.config().llm.width;
  const double t_start = now_seconds();
  const EncoderInput encoder_input = pack_encoder(sampler_, batch, work.images);
  // The exchanges' row lists go up now too, so that from here to the end of the step nothing but
  // documented scalars crosses between host and device (StepOutcome::transfers).
  BoundaryExchange boundary(world_.comm, world_comm_, work.image_route, width);
  std::vector<std::unique_ptr<KvExchange>> kv = make_kv_exchanges(work, group_comm, width);
  const double t_packed = now_seconds();
  out.input_transfers = transfer_counts() - transfers_before;

  EncoderActivations enc_acts;
  model_.encoder_forward(encoder_input, enc_acts);
  const double t_enc_fwd = now_seconds();

  t_mat received("boundary::received", work.received_rows, width);
  boundary.forward(enc_acts.embeddings, received);
  const double t_boundary_fwd = now_seconds();

  t_mat d_received("boundary::d_received", work.received_rows, width);
  for (size_t m = 0; m < llm_inputs.size(); ++m) {
    // The loss sum comes back to the host: one counted 8-byte copy per micro-batch.
    out.loss_sum += model_.llm_forward_backward(llm_inputs[m], received, grad_scale, d_received, kv[m].get());
    if (kv[m]) {
      out.kv_exchange_seconds += kv[m]->seconds();
      kv[m].reset();  // frees its staging buffers before the next micro-batch
    }
    out.flops += model_.llm_flops(llm_inputs[m]);
    out.llm_rows += llm_inputs[m].tokens;
  }
  const double t_llm = now_seconds();

  t_mat d_embeddings("boundary::d_embeddings", encoder_input.patches, width);
  boundary.backward(d_received, d_embeddings);
  const double t_boundary_bwd = now_seconds();
  model_.encoder_backward(encoder_input, enc_acts, d_embeddings);
  out.flops += model_.encoder_flops(encoder_input);
  out.encoder_rows = encoder_input.patches;
  const double t_enc_bwd = now_seconds();

  out.data_seconds += t_packed - t_start;
  out.encoder_seconds = (t_enc_fwd - t_packed) + (t_enc_bwd - t_boundary_bwd);
  out.boundary_seconds = (t_boundary_fwd - t_enc_fwd) + (t_boundary_bwd - t_llm);
  out.llm_seconds = t_llm - t_boundary_fwd;
  out.boundary_bytes = 2 * boundary.bytes_sent();
}

// Disaggregated plans (DistTrain): a dataflow pipeline over stages (pipeline_stage in rank_work.hpp), with
// point-to-point transfers so that no rank waits for ranks it exchanges nothing with. Encoder ranks encode
// stage after stage (the last stage first, forward_stage) and send each stage's rows as soon as they
// exist, then run the backward of each stage, in stage order, as its gradients come back. LLM ranks run
// their micro-batches in order, each once its rows have arrived, and send its gradients straight back. The
// arithmetic is the colocated path's: each image is encoded once, each micro-batch runs once, gradients
// accumulate (encoder backward in a fixed stage order, so the result does not depend on timing).
void StepExecutor::run_pipeline(const GlobalBatch& batch, const RankWork& work,
                                const std::vector<LlmInput>& llm_inputs,
                                const std::shared_ptr<Communicator>& group_comm, float grad_scale,
                                const TransferCounts& transfers_before, StepOutcome& out) {
  const int width = model_.config().llm.width;
  const int stages = static_cast<int>(work.stages.size());
  // Each stage's two directions have their own message tag.
  int* tag_ub = nullptr;
  int has_tag_ub = 0;
  MPI_Comm_get_attr(world_.comm, MPI_TAG_UB, &tag_ub, &has_tag_ub);
  if (has_tag_ub && 2 * static_cast<long long>(stages) - 1 > *tag_ub)
    throw std::invalid_argument("disaggregated pipeline: " + std::to_string(stages) +
                                " stages need more message tags than MPI_TAG_UB = " +
                                std::to_string(*tag_ub) + "; use fewer micro-batches per LLM group");
  double t = now_seconds();
  const auto lap = [&t](double& into) {
    const double now = now_seconds();
    into += now - t;
    t = now;
  };
  std::vector<EncoderInput> encoder_inputs;
  std::vector<std::unique_ptr<BoundaryExchange>> exchanges;  // one per stage; collective to build
  for (int m = 0; m < stages; ++m) {
    encoder_inputs.push_back(pack_encoder(sampler_, batch, work.stages[m].images));
    exchanges.push_back(
        std::make_unique<BoundaryExchange>(world_.comm, world_comm_, work.stages[m].route, width, m));
  }
  t_mat received("boundary::received", work.received_rows, width);
  t_mat d_received("boundary::d_received", work.received_rows, width);
  std::vector<std::unique_ptr<KvExchange>> kv = make_kv_exchanges(work, group_comm, width);
  std::vector<t_mat> d_embeddings;
  for (int m = 0; m < stages; ++m) {
    d_embeddings.emplace_back("boundary::d_embeddings", encoder_inputs[m].patches, width);
    exchanges[m]->post_forward_receives();
    exchanges[m]->post_backward_receives();
  }
  lap(out.data_seconds);
  // The pipeline's point-to-point transfers go through MPI: on a device they stage through host memory,
  // and those copies are counted in StepOutcome::transfers.
  out.input_transfers = transfer_counts() - transfers_before;

  // Encoder side: every forward, sending each stage's rows at once.
  std::vector<EncoderActivations> encoder_acts(stages);
  for (int position = 0; position < stages; ++position) {
    const int m = forward_stage(position, stages);
    model_.encoder_forward(encoder_inputs[m], encoder_acts[m]);
    lap(out.encoder_seconds);
    exchanges[m]->start_forward_sends(encoder_acts[m].embeddings, received);
    lap(out.boundary_seconds);
  }

  // LLM side: micro-batches in order as their rows arrive; gradients straight back.
  for (size_t j = 0; j < llm_inputs.size(); ++j) {
    const MicroBatchWork& mb = work.micro_batches[j];
    exchanges[mb.stage]->finish_forward_receives(received);
    lap(out.boundary_seconds);
    out.loss_sum += model_.llm_forward_backward(llm_inputs[j], received, grad_scale, d_received, kv[j].get());
    if (kv[j]) {
      out.kv_exchange_seconds += kv[j]->seconds();
      kv[j].reset();
    }
    out.flops += model_.llm_flops(llm_inputs[j]);
    out.llm_rows += llm_inputs[j].tokens;
    lap(out.llm_seconds);
    exchanges[mb.stage]->start_backward_sends(d_received, d_embeddings[mb.stage]);
    lap(out.boundary_seconds);
  }

  // Encoder side: each stage's backward once its gradients are back, in stage order.
  for (int m = 0; m < stages; ++m) {
    exchanges[m]->finish_forward_receives(received);  // no-op unless a stage's rows came to no micro-batch
    exchanges[m]->finish_backward_receives(d_embeddings[m]);
    lap(out.boundary_seconds);
    model_.encoder_backward(encoder_inputs[m], encoder_acts[m], d_embeddings[m]);
    encoder_acts[m] = EncoderActivations();
    out.flops += model_.encoder_flops(encoder_inputs[m]);
    out.encoder_rows += encoder_inputs[m].patches;
    lap(out.encoder_seconds);
  }
  for (int m = 0; m < stages; ++m) {
    exchanges[m]->finish_sends();
    out.boundary_bytes += 2 * exchanges[m]->bytes_sent();
  }
  lap(out.boundary_seconds);
}

}  // namespace minimllm
