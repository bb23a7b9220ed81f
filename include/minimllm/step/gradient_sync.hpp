// The data-parallel end of a step's backward pass: every rank's gradient summed into model.grads() and
// the loss summed over ranks. Afterwards model.grads() and outcome.loss_sum are identical on every rank,
// and outcome.grad_norm is the gradient's L2 norm. With the distributed optimizer (reduce_scatter) only
// the rank's own shard of model.grads() holds the sum (synchronised() says which range); the rest keeps
// the rank's partial gradient, and AdamW::step then overwrites the shard with the updated parameters it
// all-gathers from.
//
// Overlapped (runtime.overlap_grad_sync, the default): the gradient buffer is cut into buckets of whole
// gradient units (Model::gradient_units: layers, in the order backward finishes them), about
// runtime.grad_bucket_mb MiB each. The model's backward tells GradientSync (a GradientListener) as each
// unit is done; on the step's last micro-batch (the executor passes the listener only then) a bucket's
// nonblocking all-reduce starts as soon as all its units are done and every earlier bucket has started, so
// every rank starts the same all-reduces in the same order. Each report, and each progress() call between a
// block's kernels, pokes the all-reduces in flight (MPI makes progress only inside MPI calls). finish()
// starts what is left and waits for everything: the optimizer never sees a partial sum. Serial: one blocking
// all-reduce of the whole buffer in finish(). Both sum the same two (or N) values per element; MPI may
// associate an N > 2 sum differently for different message sizes, so the two agree bitwise on 2 ranks and to
// rounding beyond.
//
// Reduce-scattered (parallel.distributed_optimizer, ZeRO-1): one blocking reduce-scatter of the whole
// buffer in finish(), after the backward, leaving each rank the sum of its own shard only
// (ParameterShards over the gradient communicator) in that range of model.grads(); the rest of the buffer
// keeps this rank's own partial gradient. Not overlapped: a bucket's runs cross the shards, so the
// shard would not be one contiguous range (runtime.overlap_grad_sync is ignored; the banner says so).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/parallel/communicator.hpp"
#include "minimllm/step/finite_check.hpp"

namespace minimllm {

struct StepOutcome;

struct GradSyncOptions {
  bool overlap = true;     // runtime.overlap_grad_sync
  double bucket_mb = 8.0;  // runtime.grad_bucket_mb: MiB per bucket (>= 0; 0: one bucket per unit)
  // For measurements only (bench_grad_sync): no gradient all-reduce at all, so each rank keeps its own
  // gradient. Never set by a deck.
  bool skip = false;
  bool reduce_scatter = false;  // parallel.distributed_optimizer: each rank keeps its own shard's sum

  // Whether the backward starts the sync (overlap is not supported with reduce_scatter).
  bool overlapped() const { return overlap && !reduce_scatter && !skip; }
};

// A run's options (runtime.overlap_grad_sync, runtime.grad_bucket_mb, parallel.distributed_optimizer).
GradSyncOptions grad_sync_options(const RunConfig& config);

// Consecutive gradient units [first_unit, last_unit) and the runs of the gradient buffer they cover
// (offset, count; adjacent tensors merged), one all-reduce per run.
struct GradientBucket {
  int first_unit = 0, last_unit = 0;
  std::vector<std::pair<std::size_t, std::size_t>> runs;
  std::size_t floats = 0;
};

// Units in Model::gradient_units order, a bucket closed once it holds at least bucket_mb MiB.
std::vector<GradientBucket> gradient_buckets(const Model& model, double bucket_mb);

class GradientSync final : public GradientListener {
 public:
  GradientSync(const Model& model, GradSyncOptions options);
  ~GradientSync() override;

  const GradSyncOptions& options() const { return options_; }
  const std::vector<GradientBucket>& buckets() const { return buckets_; }

  // Before the step's backward: no unit done, nothing in flight. gradients: the step's gradient
  // communicator (StepComms::gradients), every rank's.
  void begin(Communicator& gradients);
  // What the executor passes to the last micro-batch's backward passes: this between begin() and
  // finish() when overlapping, else nullptr.
  GradientListener* listener() { return comm_ && options_.overlapped() ? this : nullptr; }
  void gradients_ready(int unit) override;
  void progress() override;  // pokes the all-reduces in flight (CommRequest::progress)

  // After the backward: the rest of the gradient all-reduce (all of it when serial; the reduce-scatter
  // with reduce_scatter), the loss summed over world, the gradient norm. Times itself as Phase::grad_sync
  // in outcome.seconds: with overlap, the sync time the backward did not hide.
  void finish(Model& model, Communicator& world, StepOutcome& outcome);
  // Where the last finish() left the summed gradient (the whole buffer unless reduce_scatter); its
  // communicator is finish()'s world.
  const SynchronisedGradient& synchronised() const { return synchronised_; }

  // Buckets of the last step whose all-reduce started before finish() (overlap at work; 0 when serial).
  int started_early() const { return started_early_; }

 private:
  void start_ready_buckets();

  const Model& model_;
  GradSyncOptions options_;
  std::vector<GradientBucket> buckets_;
  Communicator* comm_ = nullptr;
  std::vector<char> done_;  // per unit
  std::size_t started_ = 0;
  int started_early_ = 0;
  std::vector<std::unique_ptr<CommRequest>> in_flight_;
  t_vec shard_sum_;  // reduce_scatter: the received shard, copied into model.grads() (no aliasing in MPI)
  SynchronisedGradient synchronised_;
};

}  // namespace minimllm
