// A GEMM's time by its shape (planning/gemm_rates.hpp) and what a layout's shapes do to the cost model
// (planning/gemm_shapes.hpp): the roofline and its quantizations by hand, the measured rates' interpolation,
// the model's linears against the cost model's FLOP count, and narrow slices and short calls costing more
// per FLOP; machine.gemm read strictly and a calibration's gemm_rates read back and used.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "minimllm/config/input_error.hpp"
#include "minimllm/config/machine_config.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/resolve_cost_model.hpp"
#include "minimllm/planning/calibration.hpp"
#include "minimllm/planning/gemm_rates.hpp"
#include "minimllm/planning/gemm_shapes.hpp"

namespace minimllm {
namespace {

const std::filesystem::path kInputs = std::filesystem::path(__FILE__).parent_path().parent_path() / "inputs";

GemmSpec small_machine() {
  GemmSpec s;
  s.efficiency = 1.0, s.memory_gbs = 1e9, s.launch_us = 0.0;  // compute-bound, no fixed cost
  s.tile_m = s.tile_n = s.tile_k = 8;
  s.units = 4;
  return s;
}

TEST(GemmRates, RooflineByHand) {
  const GemmRates peak = GemmRates::at_peak(1.0);  // 1 GFLOP/s
  EXPECT_DOUBLE_EQ(peak.seconds({16, 16, 16}), 8192e-9);
  EXPECT_FALSE(peak.shape_dependent());
  const GemmRates r = GemmRates::roofline(1.0, small_machine());
  EXPECT_TRUE(r.shape_dependent());
  // 2 x 2 x 2 k-blocks fill 4 units in two rounds: the peak.
  EXPECT_DOUBLE_EQ(r.seconds({16, 16, 16}), 8192e-9);
  // A row more pads to a whole tile: as long as 24 rows.
  EXPECT_DOUBLE_EQ(r.seconds({17, 16, 16}), r.seconds({24, 16, 16}));
  EXPECT_DOUBLE_EQ(r.seconds({17, 16, 16}), 3.0 * 2 * 2 / 4.0 * 4 * 1024e-9);
  // One k-block leaves 3 of the 4 units idle: 4 times its FLOPs' time.
  EXPECT_DOUBLE_EQ(r.seconds({8, 8, 8}), 4.0 * 1024e-9);
  // Stream-K: a short, wide output with a long k still fills the units (one tile, 4 k-blocks).
  EXPECT_DOUBLE_EQ(r.seconds({8, 8, 32}), 4096e-9);
  // Memory-bound (a peak of 1 TFLOP/s): 2 bytes x (m k + k n + m n) at 1 GB/s.
  GemmSpec slow_memory = small_machine();
  slow_memory.memory_gbs = 1.0;
  EXPECT_DOUBLE_EQ(GemmRates::roofline(1000.0, slow_memory).seconds({16, 16, 16}), 2.0 * 3 * 256 * 1e-9);
  // A call's fixed cost, and half the efficiency doubles the compute.
  GemmSpec launch = small_machine();
  launch.launch_us = 3.0, launch.efficiency = 0.5;
  EXPECT_DOUBLE_EQ(GemmRates::roofline(1.0, launch).seconds({16, 16, 16}), 3e-6 + 2.0 * 8192e-9);
  EXPECT_EQ(r.seconds({0, 16, 16}), 0.0);
}

TEST(GemmRates, MeasuredInterpolatesInLogRowsOfTheNearestClass) {
  const GemmRates r = GemmRates::measured(
      {{100, 64, 64, 10.0}, {1000, 64, 64, 20.0}, {100, 4096, 4096, 500.0}, {1000, 4096, 4096, 900.0}});
  const auto gflops = [&](double m, double n, double k) {
    return GemmShape{m, n, k}.flops() / r.seconds({m, n, k}) * 1e-9;
  };
  EXPECT_NEAR(gflops(100, 64, 64), 10.0, 1e-9);
  EXPECT_NEAR(gflops(std::sqrt(100.0 * 1000.0), 64, 64), 15.0, 1e-9);  // the log midpoint
  EXPECT_NEAR(gflops(50, 64, 64), 10.0, 1e-9);                         // held beyond the ends
  EXPECT_NEAR(gflops(5000, 64, 64), 20.0, 1e-9);
  EXPECT_NEAR(gflops(1000, 60, 70), 20.0, 1e-9);  // the nearest (n, k)
  EXPECT_NEAR(gflops(1000, 3000, 5000), 900.0, 1e-9);
  EXPECT_THROW(GemmRates::measured({}), std::invalid_argument);
  EXPECT_THROW(GemmRates::measured({{10, 10, 10, 0.0}}), std::invalid_argument);
}

TEST(GemmShapes, LinearsCountTheCostModelsFlops) {
  const RunConfig config = load_run_config((kInputs / "llm_7b_multimodal_4d.yaml").string());
  const CostModel flops = default_cost_model(config, 1.0, 8);  // seconds per FLOP: 1e-9
  const GemmRates peak = GemmRates::at_peak(1.0);
  const double rows = 1000.0;
  const LlmConfig& llm = config.model.llm;
  const double attention = 6.0 * llm.width * llm.layers;  // the linear term's attention core, not a GEMM
  EXPECT_NEAR(linear_seconds(peak, llm_linears(llm, 1), rows) / rows, flops.llm.a1 - attention * 1e-9,
              1e-12 * flops.llm.a1);
  const EncoderConfig& encoder = config.model.vision();
  EXPECT_NEAR(linear_seconds(peak, encoder_linears(encoder, llm.width, 1), rows) / rows,
              flops.encoders[0].compute.a1, 1e-12 * flops.encoders[0].compute.a1);
  // Slicing keeps a rank's share of the FLOPs, but the replicated patch embedding.
  for (int tp : {2, 4})
    EXPECT_NEAR(linear_seconds(peak, llm_linears(llm, tp), rows) * tp,
                linear_seconds(peak, llm_linears(llm, 1), rows),
                1e-9 * linear_seconds(peak, llm_linears(llm, 1), rows));
}

TEST(GemmShapes, AtThePeakNothingChangesAndNarrowSlicesCostMoreOnARoofline) {
  RunConfig config = load_run_config((kInputs / "llm_7b_multimodal_4d.yaml").string());
  const ModelParallel grid = model_parallel_of(config);
  const CostModel base = default_cost_model(config, 1000.0, 8);
  CostModel same = base;
  const GemmRates peak = GemmRates::at_peak(1000.0);
  const GemmShapeEffect none = apply_gemm_shapes(same, config, grid, 1024, peak, peak);
  EXPECT_NEAR(none.llm_factor, 1.0, 1e-12);
  EXPECT_NEAR(same.llm.a1, base.llm.a1, 1e-12 * base.llm.a1);
  // The encoder's replicated patch embedding is all that grows, (encoder_tp - 1) times its FLOPs.
  const EncoderConfig& e = config.model.vision();
  const double embed = 4.0 * e.input_width() * e.width, total = base.encoders[0].compute.a1 * 1e12;
  EXPECT_NEAR(none.encoder_factors[0], (total + (grid.encoder_tp - 1) * embed) / total, 1e-9);
  EXPECT_GT(none.rows.llm, 1.0);
  EXPECT_GT(none.rows.encoders[0], 1.0);

  // A GPU-like roofline: the shorter the call and the narrower the slice, the more each FLOP costs.
  GemmSpec gpu;
  gpu.efficiency = 0.8, gpu.memory_gbs = 3000, gpu.launch_us = 5, gpu.units = 132;
  gpu.tile_m = 128, gpu.tile_n = 256, gpu.tile_k = 64;
  const GemmRates roofline = GemmRates::roofline(1000.0, gpu);
  const std::vector<RankLinear> whole = encoder_linears(e, config.model.llm.width, 1);
  const auto per_flop = [&](int tp, double rows) {
    return linear_seconds(roofline, encoder_linears(e, config.model.llm.width, tp), rows) * tp /
           linear_seconds(peak, whole, rows);
  };
  EXPECT_GE(per_flop(1, 1e6), 1.0 / gpu.efficiency);
  EXPECT_LT(per_flop(1, 1e6), 1.0 / gpu.efficiency * 1.02);  // a GEMM that fills the machine
  EXPECT_GT(per_flop(4, 256), per_flop(1, 256));             // a slice of a short call
  EXPECT_GT(per_flop(1, 256), per_flop(1, 4096));            // a short call
  CostModel priced = base;
  const GemmShapeEffect effect = apply_gemm_shapes(priced, config, grid, 1024, roofline, peak);
  EXPECT_GT(effect.llm_factor, 1.0 / gpu.efficiency);
  EXPECT_GT(priced.llm.a1, base.llm.a1);
  EXPECT_EQ(priced.llm.a2, base.llm.a2);  // the attention core is not priced by shape
  EXPECT_NEAR(priced.encoders[0].compute.a1, base.encoders[0].compute.a1 * effect.encoder_factors[0], 1e-20);
}

// The encoder per micro-batch (parallel.encoder_schedule) runs shorter encoder calls: an LLM micro-batch's
// share of the module's rows on each of a data rank's encoder groups, never more than the step's; on a
// GPU-like roofline they cost more per FLOP. The LLM's calls do not change.
TEST(GemmShapes, EncoderPerMicroBatchRunsShorterCalls) {
  RunConfig config = load_run_config((kInputs / "llm_7b_multimodal_4d.yaml").string());
  const ModelParallel grid = model_parallel_of(config);
  const GemmRows per_step = representative_gemm_rows(config, grid, 1024);
  config.parallel.encoder_schedule = "per_micro_batch";
  const GemmRows per_micro_batch = representative_gemm_rows(config, grid, 1024);
  EXPECT_EQ(per_micro_batch.llm, per_step.llm);
  EXPECT_LT(per_micro_batch.encoders[0], per_step.encoders[0]);
  // By hand: the deck's image share of its rows times the LLM's rows a call, over tp / encoder_tp groups.
  const Sampler sampler(config);
  double tokens = 0.0, image_rows = 0.0;
  for (int step = 0; step < std::min(config.steps, 4); ++step) {
    const GlobalBatch batch = sampler.batch(step);
    for (const SampleMeta& s : batch.samples) tokens += s.tokens(), image_rows += s.encoder_rows();
  }
  EXPECT_NEAR(per_micro_batch.encoders[0], per_step.llm * image_rows / tokens * grid.encoder_tp / grid.tp,
              1e-9 * per_micro_batch.encoders[0]);
  GemmSpec gpu;
  gpu.efficiency = 1.0, gpu.memory_gbs = 3000, gpu.launch_us = 4, gpu.units = 132;
  gpu.tile_m = 128, gpu.tile_n = 256, gpu.tile_k = 64;
  const GemmRates roofline = GemmRates::roofline(1000.0, gpu), peak = GemmRates::at_peak(1000.0);
  CostModel once = default_cost_model(config, 1000.0, 8), staged = once;
  config.parallel.encoder_schedule = "per_step";
  const GemmShapeEffect step_effect = apply_gemm_shapes(once, config, grid, 1024, roofline, peak);
  config.parallel.encoder_schedule = "per_micro_batch";
  const GemmShapeEffect staged_effect = apply_gemm_shapes(staged, config, grid, 1024, roofline, peak);
  EXPECT_GT(staged_effect.encoder_factors[0], step_effect.encoder_factors[0]);
  EXPECT_EQ(staged_effect.llm_factor, step_effect.llm_factor);
}

TEST(GemmShapes, MachineSectionIsReadStrictlyAndPresetsHaveOne) {
  const MachineConfig h100 = load_machine_file((kInputs / "machines" / "dgx-h100.yaml").string());
  ASSERT_TRUE(h100.gemm.given());
  EXPECT_EQ(h100.gemm.units, 132);
  EXPECT_EQ(h100.gemm.tile_k, 64);
  EXPECT_EQ(machine_to_yaml(parse_machine_text(machine_to_yaml(h100), "back.yaml")), machine_to_yaml(h100));
  const auto error = [](const std::string& gemm) {
    try {
      parse_machine_text("machine:\n  gemm: " + gemm + "\n", "m.yaml");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const std::string good = "efficiency: 0.7, memory_gbs: 2000, launch_us: 3, units: 108";
  EXPECT_EQ(error("{" + good + ", tile: [128, 128, 32]}"), "(no error)");
  EXPECT_EQ(error("{" + good + ", tile: [128, 128]}"),
            "m.yaml: machine.gemm.tile = [128, 128]: must be three sizes: [m, n, k], the output tile and its "
            "k-block");
  EXPECT_EQ(error("{efficiency: 1.5, memory_gbs: 2000, launch_us: 3, units: 108, tile: [1, 1, 1]}"),
            "m.yaml: machine.gemm.efficiency = 1.5: must be a number in [0.01, 1]");
  EXPECT_EQ(error("{efficiency: 0.5}"),
            "m.yaml: machine.gemm.memory_gbs = (missing): required key in machine.gemm");
}

TEST(GemmShapes, CalibrationRatesRoundTripAndPriceTheLayout) {
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "quickstart");
  Calibration c;
  c.model = config.model;
  c.encoder.cost = c.llm.cost = {0.0, 1e-6, 1e-5};
  c.gemm_rates = {{16, 64, 64, 2.0}, {256, 64, 64, 8.0}, {16, 192, 64, 3.0}, {256, 192, 64, 9.0}};
  const std::string text = calibration_to_yaml(c);
  const Calibration back = parse_calibration(text, "cal.yaml");
  ASSERT_EQ(back.gemm_rates.size(), 4u);
  EXPECT_EQ(back.gemm_rates[1].m, 256);
  EXPECT_EQ(back.gemm_rates[3].gflops, 9.0);
  std::string bad = text;
  bad.replace(bad.find("  gflops: [2, 8, 3, 9]"), 22, "  gflops: [2, 8, 3]");
  EXPECT_THROW(parse_calibration(bad, "cal.yaml"), InputError);

  // A calibrated run prices its shapes with the measured rates against themselves: at tp 1 and the rows
  // it measured at, nothing changes; its banner says what they did.
  CostModelChoice choice;
  choice.model = apply_calibration(default_cost_model(config, 10.0, 1), back, config.model, "cal.yaml");
  choice.source = "cal.yaml", choice.calibration_text = text, choice.gemm_rates = back.gemm_rates;
  ResolvedMachine machine = resolve_machine({}, "none", {1, "test"}, {10.0, "test"}, {});
  const CostModel cost = resolve_cost_model(config, choice, machine, 2);
  EXPECT_NE(machine.gemm_shapes.find("measured at 4 shapes"), std::string::npos) << machine.gemm_shapes;
  EXPECT_NEAR(cost.llm.a1, choice.model.llm.a1, 1e-12 * choice.model.llm.a1);
  // Without measured rates and without machine.gemm: no line, nothing priced.
  choice.gemm_rates.clear();
  ResolvedMachine plain = resolve_machine({}, "none", {1, "test"}, {10.0, "test"}, {});
  resolve_cost_model(config, choice, plain, 2);
  EXPECT_TRUE(plain.gemm_shapes.empty());
}

}  // namespace
}  // namespace minimllm
