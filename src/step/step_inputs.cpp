#include "minimllm/step/step_inputs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "minimllm/core/clock.hpp"
#include "minimllm/step/packing.hpp"
#include "minimllm/step/sample_movement.hpp"

namespace minimllm {

StepInputs upload_step_inputs(const Sampler& sampler, const PlannedStep& planned, const StepComms& comms,
                              int width, AttentionShape attention, CpComm cp_comm,
                              const TensorParallel& encoder_groups) {
  const TransferCounts before = transfer_counts();
  const GlobalBatch& batch = planned.batch;
  const RankWork& work = planned.work;
  StepInputs in;
  const double movement_start = host_seconds();  // host work and MPI only: no fence needed
  const SampleInputs inputs = SampleInputs::move(sampler, batch, planned.plan, *comms.world);
  in.movement_seconds = host_seconds() - movement_start;
  in.movement_bytes = inputs.received_bytes();
  // Every rank knows the global target count, so the loss and its gradient are normalised alike.
  in.grad_scale = 1.0f / static_cast<float>(std::max<std::int64_t>(1, batch.loss_targets()));
  for (const MicroBatchWork& mb : work.micro_batches) in.llm.push_back(pack_llm(inputs, batch, mb));
  // This rank's encoder input: all of `images`, or its group's run of them.
  const auto encoder_input = [&](const std::vector<int>& images) {
    if (encoder_groups.size == 1) return pack_encoder(inputs, batch, images);
    in.encoder_group_rows.emplace_back();
    return pack_encoder(inputs, batch,
                        encoder_group_images(batch, images, encoder_groups.rank, encoder_groups.size,
                                             in.encoder_group_rows.back()));
  };
  if (!work.stages.empty()) {
    // A staged plan (disaggregated, or the encoder per micro-batch): each stage's two directions have their
    // own message tag.
    const long long stages = static_cast<long long>(work.stages.size());
    if (2 * stages - 1 > comms.world->max_tag())
      throw std::invalid_argument(
          fmt::format("{} encoder stages need more message tags than MPI_TAG_UB = {}; use fewer "
                      "micro-batches per LLM group",
                      stages, comms.world->max_tag()));
    for (size_t m = 0; m < work.stages.size(); ++m) {
      in.encoder.push_back(encoder_input(work.stages[m].items));
      in.boundary.push_back(std::make_unique<BoundaryExchange>(comms.world, expand(work.stages[m].route),
                                                               width, static_cast<int>(m)));
    }
  } else {
    in.encoder.push_back(encoder_input(work.items));
    in.boundary.push_back(std::make_unique<BoundaryExchange>(comms.world, expand(work.item_route), width));
  }
  in.kv.resize(work.micro_batches.size());
  if (work.group_ranks.size() > 1) {
    for (size_t m = 0; m < in.kv.size(); ++m)
      in.kv[m] = make_context_attention(cp_comm, comms.llm_group, work.micro_batches[m], attention);
  }
  in.transfers = transfer_counts() - before;
  return in;
}

}  // namespace minimllm
