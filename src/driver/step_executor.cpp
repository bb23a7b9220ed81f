#include "minimllm/driver/step_executor.hpp"

#include <chrono>

#include "minimllm/parallel/boundary_exchange.hpp"
#include "minimllm/parallel/kv_exchange.hpp"
#include "minimllm/plan/rank_work.hpp"

namespace minimllm {
namespace {

double now_seconds() {
  Kokkos::fence();  // a phase ends when its kernels have
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Sums a buffer over the world in place; device buffers go through a host mirror.
void allreduce_sum(const t_vec& v, MPI_Comm comm) {
  if constexpr (kMemSpaceIsHostAccessible) {
    MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.extent(0)), MPI_FLOAT, MPI_SUM, comm);
  } else {
    auto host = copy_to_host(v);
    MPI_Allreduce(MPI_IN_PLACE, host.data(), static_cast<int>(host.extent(0)), MPI_FLOAT, MPI_SUM, comm);
    transfer(v, host);
  }
}

}  // namespace

StepExecutor::StepExecutor(const Sampler& sampler, Model& model, const World& world, CommPool& pool)
    : sampler_(sampler), model_(model), world_(world), pool_(pool) {}

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
  // Per-token normalisation over the global batch: every rank knows the global target count.
  const float grad_scale = 1.0f / static_cast<float>(std::max<std::int64_t>(1, batch.loss_targets()));
  model_.zero_grads();
  const double t_data = now_seconds();

  EncoderActivations enc_acts;
  model_.encoder_forward(encoder_input, enc_acts);
  const double t_enc_fwd = now_seconds();

  BoundaryExchange boundary(world_.comm, work.image_route, width);
  t_mat received("boundary::received", work.received_rows, width);
  boundary.forward(enc_acts.embeddings, received);
  const double t_boundary_fwd = now_seconds();

  t_mat d_received("boundary::d_received", work.received_rows, width);
  for (size_t m = 0; m < llm_inputs.size(); ++m) {
    std::unique_ptr<KvExchange> kv;
    if (work.group_ranks.size() > 1)
      kv = std::make_unique<KvExchange>(group_comm, work.micro_batches[m], 2 * width);
    out.loss_sum += model_.llm_forward_backward(llm_inputs[m], received, grad_scale, d_received, kv.get());
    if (kv) out.kv_exchange_seconds += kv->seconds();
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

  allreduce_sum(model_.grads(), world_.comm);
  MPI_Allreduce(MPI_IN_PLACE, &out.loss_sum, 1, MPI_DOUBLE, MPI_SUM, world_.comm);
  const double t_sync = now_seconds();

  out.data_seconds = t_data - t0;
  out.encoder_seconds = (t_enc_fwd - t_data) + (t_enc_bwd - t_boundary_bwd);
  out.boundary_seconds = (t_boundary_fwd - t_enc_fwd) + (t_boundary_bwd - t_llm);
  out.llm_seconds = t_llm - t_boundary_fwd;
  out.grad_sync_seconds = t_sync - t_enc_bwd;
  out.boundary_bytes = 2 * boundary.bytes_sent();
  out.transfers = transfer_counts() - transfers_before;
  return out;
}

}  // namespace minimllm
