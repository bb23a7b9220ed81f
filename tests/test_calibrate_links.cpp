// `minimllm calibrate` on 2 ranks of one node measures one message between them (pipeline stages' link)
// and the all-reduce of the deck's tensor-parallel groups, and the share of a context-parallel ring's
// transfers hidden behind its attention (machine.cp_overlap), writes them to the file and the cost model uses
// them; between nodes nothing can be measured here.
#include <gtest/gtest.h>
#include <mpi.h>

#include "minimllm/driver/calibrate.hpp"
#include "minimllm/driver/cli.hpp"
#include "minimllm/planning/calibration.hpp"
#include "mpi_world.hpp"

namespace minimllm {
namespace {

TEST(CalibrateLinks, MeasuresTheMessageAndTheTensorParallelAllReduce) {
  const World world = World::of(MPI_COMM_WORLD);
  if (world.size != 2) GTEST_SKIP() << "2 ranks of one node";
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "quickstart");
  config.parallel.tp = 2;
  CalibrateOptions options;
  options.sizes = 3, options.repeats = 1;
  const Calibration c = calibrate(config, world, options);
  ASSERT_TRUE(c.point_to_point.measured);
  EXPECT_GT(c.point_to_point.link.bandwidth, 0.0);
  EXPECT_EQ(c.point_to_point.points.sizes.size(), 5u);  // 1 KiB to 4 MiB
  // A 4 MiB message takes longer than a 1 KiB one: the fit saw a link, not noise.
  EXPECT_GT(c.point_to_point.points.seconds.back(), c.point_to_point.points.seconds.front());
  EXPECT_FALSE(c.inter_point_to_point.measured);  // one node
  EXPECT_EQ(c.tensor_parallel_ranks, 2);
  ASSERT_TRUE(c.tensor_parallel_all_reduce.measured);
  const Calibration back = parse_calibration(calibration_to_yaml(c), "links.yaml");
  EXPECT_EQ(back.point_to_point.link.bandwidth, c.point_to_point.link.bandwidth);
  EXPECT_EQ(back.tensor_parallel_all_reduce.link.latency, c.tensor_parallel_all_reduce.link.latency);
  const CostModel cost = apply_calibration(default_cost_model(config, 100.0, 2), back, config.model, "x");
  EXPECT_EQ(cost.point_to_point(false).bandwidth, c.point_to_point.link.bandwidth);
  EXPECT_EQ(cost.tp_allreduce(2).bandwidth, c.tensor_parallel_all_reduce.link.bandwidth);
  // The ring's overlap: a share, noted with the times it comes from, read back, used by the cost model.
  EXPECT_GE(c.machine.cp_overlap, 0.0);
  EXPECT_LE(c.machine.cp_overlap, 1.0);
  ASSERT_FALSE(c.machine_notes.empty());
  EXPECT_NE(c.machine_notes.front().find("cp_overlap ("), std::string::npos) << c.machine_notes.front();
  EXPECT_EQ(back.machine.cp_overlap, c.machine.cp_overlap);
  EXPECT_EQ(cost.cp_overlap, c.machine.cp_overlap);
  // The GEMM rates at the layout's shapes: the LLM's QKV at tp 1 and sliced over the deck's tp 2.
  ASSERT_FALSE(c.gemm_rates.empty());
  const int w = config.model.llm.width;
  const auto measured = [&](int n, int k) {
    for (const GemmRatePoint& p : c.gemm_rates)
      if (p.n == n && p.k == k) return p.gflops > 0.0;
    return false;
  };
  EXPECT_TRUE(measured(3 * w, w));
  EXPECT_TRUE(measured(3 * w / 2, w));
  EXPECT_EQ(back.gemm_rates.size(), c.gemm_rates.size());
  // Every rank holds the same calibration (rank 0's measurements, broadcast).
  double values[2] = {c.point_to_point.link.bandwidth, c.machine.cp_overlap};
  MPI_Bcast(values, 2, MPI_DOUBLE, 0, world.comm);
  EXPECT_EQ(values[0], c.point_to_point.link.bandwidth);
  EXPECT_EQ(values[1], c.machine.cp_overlap);
}

}  // namespace
}  // namespace minimllm
