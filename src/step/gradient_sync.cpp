#include "minimllm/step/gradient_sync.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <stdexcept>
#include <utility>

#include "minimllm/core/phase.hpp"
#include "minimllm/step/finite_check.hpp"
#include "minimllm/step/step_executor.hpp"

namespace minimllm {

std::vector<GradientBucket> gradient_buckets(const Model& model, double bucket_mb) {
  const double bucket_floats = bucket_mb * 1024.0 * 1024.0 / sizeof(float);
  const std::vector<GradientUnit>& units = model.gradient_units();
  std::vector<GradientBucket> buckets;
  GradientBucket bucket;
  std::vector<std::pair<std::size_t, std::size_t>> ranges;
  for (int u = 0; u < static_cast<int>(units.size()); ++u) {
    for (const TensorRange& t : units[u].tensors) {
      if (t.count > 0) ranges.emplace_back(t.offset, t.count);
      bucket.floats += t.count;
    }
    bucket.last_unit = u + 1;
    if (static_cast<double>(bucket.floats) >= bucket_floats ||
        bucket.last_unit == static_cast<int>(units.size())) {
      std::sort(ranges.begin(), ranges.end());
      for (const auto& [offset, count] : ranges) {
        if (!bucket.runs.empty() && bucket.runs.back().first + bucket.runs.back().second == offset)
          bucket.runs.back().second += count;
        else
          bucket.runs.emplace_back(offset, count);
      }
      buckets.push_back(std::move(bucket));
      bucket = GradientBucket();
      bucket.first_unit = bucket.last_unit = u + 1;
      ranges.clear();
    }
  }
  return buckets;
}

GradSyncOptions grad_sync_options(const RunConfig& config) {
  GradSyncOptions options;
  options.overlap = config.runtime.overlap_grad_sync;
  options.bucket_mb = config.runtime.grad_bucket_mb;
  options.reduce_scatter = config.parallel.distributed_optimizer;
  return options;
}

GradientSync::GradientSync(const Model& model, GradSyncOptions options)
    : model_(model),
      options_(options),
      buckets_(gradient_buckets(model, options.bucket_mb)),
      synchronised_{ShardRange{0, model.parameter_count()}, nullptr} {
  if (!(options_.bucket_mb >= 0.0))
    throw std::invalid_argument("GradientSync: bucket_mb must be >= 0 (runtime.grad_bucket_mb)");
}

GradientSync::~GradientSync() = default;

void GradientSync::begin(Communicator& gradients) {
  // Requests of a step that ended in an error are still MPI's: a new step must not start over them.
  if (!in_flight_.empty())
    throw std::logic_error("GradientSync::begin with the previous step's all-reduces still in flight");
  comm_ = &gradients;
  done_.assign(model_.gradient_units().size(), 0);
  started_ = 0;
  started_early_ = 0;
}

void GradientSync::gradients_ready(int unit) {
  if (!listener()) return;
  done_.at(unit) = 1;
  start_ready_buckets();
  progress();
}

// The progress poke, between layers and between a block's kernels: MPI (without a progress thread, as
// with one core per rank) moves a nonblocking all-reduce along only inside MPI calls.
void GradientSync::progress() {
  for (const std::unique_ptr<CommRequest>& request : in_flight_) request->progress();
}

// In bucket order only, so that every rank starts the same all-reduces in the same order whatever order
// its units finish in (a rank without LLM rows reports the LLM's units all at once).
void GradientSync::start_ready_buckets() {
  float* grads = model_.grads().data();
  while (started_ < buckets_.size()) {
    const GradientBucket& b = buckets_[started_];
    if (!std::all_of(done_.begin() + b.first_unit, done_.begin() + b.last_unit,
                     [](char d) { return d != 0; }))
      return;
    for (const auto& [offset, count] : b.runs)
      in_flight_.push_back(comm_->iallreduce_sum(grads + offset, count));
    ++started_;
  }
}

void GradientSync::finish(Model& model, Communicator& world, StepOutcome& outcome) {
  PhaseClock clock(outcome.seconds, Phase::grad_sync);
  if (!comm_) throw std::logic_error("GradientSync::finish without begin");
  synchronised_ = {ShardRange{0, model.parameter_count()}, nullptr};
  if (!options_.skip) {
    if (options_.reduce_scatter && comm_->size() == 1) {
      synchronised_ = {ShardRange{0, model.parameter_count()}, &world};  // one shard: the whole buffer
    } else if (options_.reduce_scatter) {
      const ParameterShards shards(model.parameter_count(), comm_->size());
      const ShardRange own = shards.shard(comm_->rank());
      if (shard_sum_.extent(0) != own.count) shard_sum_ = t_vec("gradient_sync::shard_sum", own.count);
      comm_->reduce_scatterv(model.grads().data(), shard_sum_.data(), shards.counts());
      Kokkos::deep_copy(Kokkos::subview(model.grads(), std::make_pair(own.offset, own.offset + own.count)),
                        shard_sum_);
      synchronised_ = {own, &world};
    } else if (options_.overlap) {
      started_early_ = static_cast<int>(started_);
      std::fill(done_.begin(), done_.end(), 1);
      start_ready_buckets();
      for (const std::unique_ptr<CommRequest>& request : in_flight_) request->wait();
      in_flight_.clear();
    } else {
      comm_->allreduce_sum(model.grads().data(), model.grads().extent(0));
    }
  }
  comm_ = nullptr;
  outcome.loss_sum = world.allreduce_sum(outcome.loss_sum);  // a host scalar
  // Of the identical synchronised gradient (or its shards, all-reduced), so identical (in finiteness at
  // least) on every rank.
  outcome.grad_norm = gradient_norm(model, synchronised_);
}

}  // namespace minimllm
