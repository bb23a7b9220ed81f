// The step's sample movement (step/sample_movement.hpp) at 1-3 ranks: every rank ends up holding exactly
// the token ids and pixels its plan gives it, equal to what the sampler generates, and the bytes that
// crossed between ranks are those plan_traffic() counts from loaders to ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "minimllm/parallel/communicator.hpp"
#include "minimllm/planning/plan_traffic.hpp"
#include "minimllm/planning/planner.hpp"
#include "minimllm/step/sample_movement.hpp"
#include "planner_inputs.hpp"

namespace minimllm {
namespace {

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

TEST(SampleMovement, EveryRankHoldsWhatItsPlanGivesItAndTheBytesArePlanTraffics) {
  const int world = world_size(), me = world_rank();
  std::vector<int> everyone(world);
  std::iota(everyone.begin(), everyone.end(), 0);
  const std::unique_ptr<Communicator> comm = create_mpi_communicator(MPI_COMM_WORLD, everyone);
  const RunConfig config = testing_support::deck("modality_incoherent", 13, 5);
  const Sampler sampler(config);
  const GlobalBatch batch = sampler.batch(2);
  CostModel cost = default_cost_model(config, 100.0, 2);
  cost.boundary_bytes_per_row = 0.0;  // plan_traffic's loader-to-rank bytes only
  const std::vector<int> first_item = first_item_of_samples(batch);
  for (const std::string policy : {"naive", "orch", "dhp", "disagg"}) {
    SCOPED_TRACE(policy + " on " + std::to_string(world) + " ranks");
    const StepPlan plan = make_planner(policy, cost, {})->plan(batch, world);
    const SampleInputs moved = SampleInputs::move(sampler, batch, plan, *comm);
    std::int64_t expected = 0;
    for (const LlmGroup& group : plan.llm_groups) {
      if (std::find(group.ranks.begin(), group.ranks.end(), me) == group.ranks.end()) continue;
      for (int s : group.samples) {
        EXPECT_EQ(moved.text_tokens(s), sampler.text_tokens(batch.step, batch.samples[s])) << "sample " << s;
        if (sample_loader_rank(s, static_cast<int>(batch.samples.size()), world) != me)
          expected += 4 * batch.samples[s].text_len;
      }
    }
    int held_images = 0;
    for (size_t s = 0; s < batch.samples.size(); ++s)
      for (size_t i = 0; i < batch.samples[s].items.size(); ++i) {
        const int image = first_item[s] + static_cast<int>(i);
        if (plan.item_owner[image] != me) {
          std::vector<float> none;
          EXPECT_THROW(moved.append_pixels(image, none), std::logic_error);
          continue;
        }
        ++held_images;
        std::vector<float> got, want;
        moved.append_pixels(image, got);
        sampler.append_image_patches(batch.step, batch.samples[s], static_cast<int>(i), want);
        EXPECT_EQ(got, want) << "image " << image;
        if (sample_loader_rank(static_cast<int>(s), static_cast<int>(batch.samples.size()), world) != me)
          expected += static_cast<std::int64_t>(4 * want.size());
      }
    EXPECT_EQ(moved.received_bytes(), expected);
    long long total = moved.received_bytes(), images = held_images;
    MPI_Allreduce(MPI_IN_PLACE, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &images, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_EQ(images, first_item.back());  // every image on exactly one rank
    const PlanTraffic traffic = plan_traffic(plan, batch, cost, world);
    EXPECT_EQ(static_cast<double>(total), traffic.intra_node_bytes + traffic.inter_node_bytes);
    // naive deals samples in the loaders' own contiguous shards, images on their sample's rank: nothing
    // moves. The balancing policies move samples off their loaders on more than one rank.
    if (policy == "naive" || world == 1) {
      EXPECT_EQ(total, 0);
    } else {
      EXPECT_GT(total, 0);
    }
    EXPECT_THROW(moved.text_tokens(static_cast<int>(batch.samples.size())), std::logic_error);
  }
}

}  // namespace
}  // namespace minimllm
