#include "minimllm/step/optimizer.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <utility>

#include "minimllm/kernels/optimizer.hpp"

namespace minimllm {
namespace {

t_vec part(const t_vec& buffer, ShardRange range) {
  return Kokkos::subview(buffer, std::make_pair(range.offset, range.offset + range.count));
}

}  // namespace

AdamW::AdamW(const Model& model, const OptimizerConfig& config)
    : config_(config),
      shards_(model.parameter_count(), 1),
      shard_(shards_.shard(0)),
      m_("adamw::m", shard_.count),
      v_("adamw::v", shard_.count) {}

AdamW::AdamW(const Model& model, const OptimizerConfig& config, std::shared_ptr<Communicator> shards)
    : config_(config),
      shards_comm_(std::move(shards)),
      shards_(model.parameter_count(), shards_comm_->size()),
      shard_(shards_.shard(shards_comm_->rank())),
      m_("adamw::m", shard_.count),
      v_("adamw::v", shard_.count) {}

void AdamW::step(Model& model, int step) {
  const OptimizerConfig& o = config_;
  const float warmup = o.warmup_steps > 0 ? std::min(1.0f, (step + 1.0f) / o.warmup_steps) : 1.0f;
  const AdamWHyper hyper{o.lr * warmup, o.beta1, o.beta2, o.eps, o.weight_decay};
  // One pass over the shard (the whole buffer when replicated); norm weights (after decayed_count) are not
  // decayed.
  const t_vec params = part(model.params(), shard_);
  adamw_update(params, part(model.grads(), shard_), m_, v_, hyper, step + 1,
               leading_in(shard_, model.decayed_count()));
  if (!shards_comm_) return;
  // MPI forbids a send buffer inside the receive buffer: the updated shard goes out from the gradient
  // buffer's own range, whose gradient this step has used (the next backward zeroes it).
  const t_vec staged = part(model.grads(), shard_);
  Kokkos::deep_copy(staged, params);
  shards_comm_->allgatherv(staged.data(), shard_.count, model.params().data(), shards_.counts());
}

}  // namespace minimllm
