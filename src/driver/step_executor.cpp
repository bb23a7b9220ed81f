#include "minimllm/driver/step_executor.hpp"

#include <chrono>
#include <memory>
#include <vector>

#include "minimllm/parallel/boundary_exchange.hpp"
#include "minimllm/parallel/kv_exchange.hpp"
#include "minimllm/plan/rank_work.hpp"

namespace minimllm {
namespace {

double now_seconds() {
  Kokkos::fence();  // a phase ends when its kernels have
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int> all_ranks(int size) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return ranks;
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
  const int width = model_.config().llm.width;
  const double t0 = now_seconds();
  const RankWork work =
      derive_rank_work(plan, batch, world_.rank, world_.size, model_.linear_weight_in_attention_pairs());
  std::vector<std::vector<int>> groups;
  for (const LlmGroup& g : plan.llm_groups) groups.push_back(g.ranks);
  const std::shared_ptr<Communicator> group_comm = pool_.acquire_step(groups);
  const EncoderInput encoder_input = pack_encoder(sampler_, batch, work.images);
  std::vector<LlmInput> llm_inputs;
  for (const MicroBatchWork& mb : work.micro_batches) llm_inputs.push_back(pack_llm(sampler_, batch, mb));
  // The exchanges' row lists go up now too, so that from here to the end of the step nothing but
  // documented scalars crosses between host and device (StepOutcome::transfers).
  BoundaryExchange boundary(world_.comm, world_comm_, work.image_route, width);
  std::vector<std::unique_ptr<KvExchange>> kv(llm_inputs.size());
  if (work.group_ranks.size() > 1) {
    for (size_t m = 0; m < kv.size(); ++m)
      kv[m] = std::make_unique<KvExchange>(group_comm, work.micro_batches[m], 2 * width);
  }
  // Per-token normalisation over the global batch: every rank knows the global target count.
  const float grad_scale = 1.0f / static_cast<float>(std::max<std::int64_t>(1, batch.loss_targets()));
  model_.zero_grads();
  const double t_data = now_seconds();
  const TransferCounts transfers_after_inputs = transfer_counts();
  out.input_transfers = transfers_after_inputs - transfers_before;

  EncoderActivations enc_acts;
  model_.encoder_forward(encoder_input, enc_acts);
  const double t_enc_fwd = now_seconds();

  t_mat received("boundary::received", work.received_rows, width);
  boundary.forward(enc_acts.embeddings, received);
  const double t_boundary_fwd = now_seconds();

  t_mat d_received("boundary::d_received", work.received_rows, width);
  for (size_t m = 0; m < llm_inputs.size(); ++m) {
    // The loss sum comes back to the host as a reduction result: the one device -> host scalar per
    // micro-batch (not a counted transfer).
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

  world_comm_->allreduce_sum(model_.grads().data(), model_.grads().extent(0));
  MPI_Allreduce(MPI_IN_PLACE, &out.loss_sum, 1, MPI_DOUBLE, MPI_SUM, world_.comm);  // a host scalar
  const double t_sync = now_seconds();

  out.data_seconds = t_data - t0;
  out.encoder_seconds = (t_enc_fwd - t_data) + (t_enc_bwd - t_boundary_bwd);
  out.boundary_seconds = (t_boundary_fwd - t_enc_fwd) + (t_boundary_bwd - t_llm);
  out.llm_seconds = t_llm - t_boundary_fwd;
  out.grad_sync_seconds = t_sync - t_enc_bwd;
  out.boundary_bytes = 2 * boundary.bytes_sent();
  out.transfers = transfer_counts() - transfers_after_inputs;
  return out;
}

}  // namespace minimllm
