// Calibration: the non-negative fit recovers known coefficients from synthetic timings; the calibration
// file round-trips exactly; bad files give one-line errors naming the file and the key; a deck naming a
// calibration uses it (the planners' cost model, the predicted step, /run cost_model_source); the
// predicted step adds the data, gradient all-reduce and optimizer terms; a quick real calibration.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "hdf5_attributes.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/trainer.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/planning/calibration.hpp"
#include "minimllm/planning/step_prediction.hpp"

namespace fs = std::filesystem;

namespace minimllm {
namespace {

// ---------------------------------------------------------------------------------------------------
// Fitting

std::vector<std::vector<double>> quadratic_rows(const std::vector<double>& sizes) {
  std::vector<std::vector<double>> rows;
  for (double s : sizes) rows.push_back({s * s, s, 1.0});
  return rows;
}

TEST(CalibrationFit, RecoversKnownCoefficientsExactly) {
  const PhaseCost truth{2.5e-9, 3.0e-6, 4.0e-5};
  const std::vector<double> sizes = {16, 40, 100, 250, 640, 1600};
  std::vector<double> y;
  for (double s : sizes) y.push_back(truth(s));
  const LinearFit fit = fit_nonnegative(quadratic_rows(sizes), y);
  ASSERT_EQ(fit.coefficients.size(), 3u);
  EXPECT_NEAR(fit.coefficients[0], truth.a2, 1e-9 * truth.a2);
  EXPECT_NEAR(fit.coefficients[1], truth.a1, 1e-9 * truth.a1);
  EXPECT_NEAR(fit.coefficients[2], truth.c, 1e-9 * truth.c);
  EXPECT_LT(fit.rms_relative_error, 1e-12);
  EXPECT_LT(fit.max_relative_error, 1e-12);
}

TEST(CalibrationFit, NoisyTimingsGiveCloseCoefficientsAndReportTheirError) {
  const PhaseCost truth{1.0e-7, 2.0e-4, 5.0e-5};  // the LLM of modality_incoherent on this machine
  std::vector<double> sizes, y;
  const double noise[] = {0.03, -0.02, 0.01, -0.03, 0.02, -0.01, 0.0, 0.015};  // relative, +-3%
  for (int i = 0; i < 8; ++i) {
    sizes.push_back(16.0 * std::pow(2.0, i));  // 16 to 2048 tokens: the quadratic term shows at the top
    y.push_back(truth(sizes.back()) * (1.0 + noise[i]));
  }
  const LinearFit fit = fit_nonnegative(quadratic_rows(sizes), y);
  EXPECT_NEAR(fit.coefficients[0], truth.a2, 0.1 * truth.a2);
  EXPECT_NEAR(fit.coefficients[1], truth.a1, 0.1 * truth.a1);
  // The fit error reflects the noise: at most the largest perturbation, and not zero.
  EXPECT_GT(fit.rms_relative_error, 0.003);
  EXPECT_LE(fit.max_relative_error, 0.031);
  // Predictions in the measured range stay within the noise.
  for (double s : {50.0, 500.0, 2000.0}) {
    const PhaseCost fitted{fit.coefficients[0], fit.coefficients[1], fit.coefficients[2]};
    EXPECT_NEAR(fitted(s), truth(s), 0.03 * truth(s)) << s;
  }
}

TEST(CalibrationFit, CoefficientsAreNeverNegative) {
  // A line through these points has a negative intercept: the best non-negative fit drops it.
  const std::vector<double> sizes = {10, 20, 40, 80};
  std::vector<double> y;
  for (double s : sizes) y.push_back(1e-6 * s - 5e-6 + 1e-9 * s * s);
  const LinearFit fit = fit_nonnegative(quadratic_rows(sizes), y);
  for (double b : fit.coefficients) EXPECT_GE(b, 0.0);
  EXPECT_EQ(fit.coefficients[2], 0.0);
}

TEST(CalibrationFit, LatencyAndBandwidth) {
  const double latency = 4e-6, bandwidth = 8e9;
  std::vector<std::vector<double>> rows;
  std::vector<double> y;
  for (double bytes : {1e3, 1e4, 1e5, 1e6, 1e7}) {
    rows.push_back({1.0, bytes});
    y.push_back(latency + bytes / bandwidth);
  }
  const LinearFit fit = fit_nonnegative(rows, y);
  EXPECT_NEAR(fit.coefficients[0], latency, 1e-9 * latency);
  EXPECT_NEAR(1.0 / fit.coefficients[1], bandwidth, 1e-6 * bandwidth);
}

// ---------------------------------------------------------------------------------------------------
// The file

Calibration sample_calibration() {
  Calibration c;
  c.deck = "inputs/quickstart.yaml", c.created = "2026-11-21T12:00:00Z", c.host = "node \"7\"";
  c.minimllm_version = "0.1.0", c.kokkos = "Kokkos 3.4.1, Serial (1 threads)";
  c.ranks = 2, c.ranks_per_node = 2, c.blas_threads = 1, c.rows_per_call = 554;
  c.model = RunConfig{}.model;
  c.model.llm.vocab = 96;
  c.encoder.cost = {1.0 / 3.0 * 1e-6, 2e-5, 3.3e-5};
  c.encoder.points = {{4, 9, 16}, {1e-4, 2e-4, 4.0000000001e-4}, 0.05, 0.08};
  c.encoder_forward_share = 0.41;
  c.llm.cost = {1.234567890123e-7, 1e-4, 0.0};
  c.llm.points = {{13, 49, 184}, {0.00137861, 0.00539752, 0.0227928}, 0.001, 0.002};
  c.data = {9.7e-5, 2.1e-5, 3.9e-7, 1e-9, {0, 19}, {0, 76}, {559, 228}, {9.6e-5, 1.2e-4}, 0.03, 0.07};
  c.optimizer_seconds = 2.78e-4, c.parameters = 126880, c.grad_sync_seconds = 2.3e-4;
  c.all_gather = {true, {4.79e-6, 4.7e9}, {{1024, 16384}, {4.7e-6, 9.5e-6}, 0.07, 0.13}};
  c.all_reduce = {true, {7.1e-6, 3.2e9}, {{1024}, {6.8e-6}, 0.2, 0.3}};
  c.inter_all_to_all = {true, {2e-5, 1e9}, {{}, {}, 0.0, 0.0}};
  c.point_to_point = {true, {1.3e-6, 9.1e9}, {{1024, 4194304}, {1.4e-6, 4.6e-4}, 0.01, 0.02}};
  c.tensor_parallel_ranks = 2;
  c.tensor_parallel_all_reduce = {true, {6.1e-6, 3.9e9}, {{1024}, {6.3e-6}, 0.1, 0.1}};
  return c;
}

void expect_same(const FitPoints& a, const FitPoints& b) {
  EXPECT_EQ(a.sizes, b.sizes);
  EXPECT_EQ(a.seconds, b.seconds);
  EXPECT_EQ(a.rms_relative_error, b.rms_relative_error);
  EXPECT_EQ(a.max_relative_error, b.max_relative_error);
}

void expect_same(const CollectiveCalibration& a, const CollectiveCalibration& b) {
  EXPECT_EQ(a.measured, b.measured);
  if (!a.measured) return;
  EXPECT_EQ(a.link.latency, b.link.latency);
  EXPECT_EQ(a.link.bandwidth, b.link.bandwidth);
  expect_same(a.points, b.points);
}

TEST(CalibrationFile, RoundTripsExactly) {
  const Calibration c = sample_calibration();
  const std::string text = calibration_to_yaml(c);
  const Calibration r = parse_calibration(text, "round.yaml");
  EXPECT_EQ(r.deck, c.deck);
  EXPECT_EQ(r.created, c.created);
  EXPECT_EQ(r.host, c.host);
  EXPECT_EQ(r.minimllm_version, c.minimllm_version);
  EXPECT_EQ(r.kokkos, c.kokkos);
  EXPECT_EQ(r.ranks, c.ranks);
  EXPECT_EQ(r.ranks_per_node, c.ranks_per_node);
  EXPECT_EQ(r.blas_threads, c.blas_threads);
  EXPECT_EQ(r.rows_per_call, c.rows_per_call);
  EXPECT_EQ(r.model.llm.vocab, 96);
  EXPECT_EQ(r.model.vision().width, c.model.vision().width);
  for (const auto& [a, b] : {std::pair{&r.encoder, &c.encoder}, std::pair{&r.llm, &c.llm}}) {
    EXPECT_EQ(a->cost.a2, b->cost.a2);  // bit for bit: the file holds shortest round-trip decimals
    EXPECT_EQ(a->cost.a1, b->cost.a1);
    EXPECT_EQ(a->cost.c, b->cost.c);
    expect_same(a->points, b->points);
  }
  EXPECT_EQ(r.data.c, c.data.c);
  EXPECT_EQ(r.data.per_patch, c.data.per_patch);
  EXPECT_EQ(r.data.per_image, c.data.per_image);
  EXPECT_EQ(r.data.images, c.data.images);
  EXPECT_EQ(r.data.per_token, c.data.per_token);
  EXPECT_EQ(r.data.seconds, c.data.seconds);
  EXPECT_EQ(r.data.patches, c.data.patches);
  EXPECT_EQ(r.data.tokens, c.data.tokens);
  EXPECT_EQ(r.optimizer_seconds, c.optimizer_seconds);
  EXPECT_EQ(r.encoder_forward_share, c.encoder_forward_share);
  EXPECT_EQ(r.parameters, c.parameters);
  EXPECT_EQ(r.grad_sync_seconds, c.grad_sync_seconds);
  expect_same(r.all_gather, c.all_gather);
  expect_same(r.all_reduce, c.all_reduce);
  expect_same(r.all_to_all, c.all_to_all);
  expect_same(r.inter_all_gather, c.inter_all_gather);
  expect_same(r.inter_all_reduce, c.inter_all_reduce);
  expect_same(r.inter_all_to_all, c.inter_all_to_all);
  expect_same(r.point_to_point, c.point_to_point);
  expect_same(r.inter_point_to_point, c.inter_point_to_point);
  EXPECT_EQ(r.tensor_parallel_ranks, c.tensor_parallel_ranks);
  expect_same(r.tensor_parallel_all_reduce, c.tensor_parallel_all_reduce);
  EXPECT_EQ(calibration_to_yaml(r), text);  // and the text is stable
  // Files from before the point-to-point and tensor-parallel links were measured have neither section.
  const std::string old = text.substr(0, text.find("# One message between two ranks"));
  ASSERT_LT(old.size(), text.size());
  const Calibration before = parse_calibration(old, "old.yaml");
  EXPECT_FALSE(before.point_to_point.measured);
  EXPECT_FALSE(before.tensor_parallel_all_reduce.measured);
}

// Replaces the first occurrence of `from` in the sample file's text.
std::string edited(const std::string& from, const std::string& to) {
  std::string text = calibration_to_yaml(sample_calibration());
  const auto at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

void expect_error(const std::string& text, const std::vector<std::string>& fragments) {
  try {
    parse_calibration(text, "cal.yaml");
    ADD_FAILURE() << "accepted; expected an error with " << fragments.front();
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_EQ(what.rfind("cal.yaml: ", 0), 0u) << what;
    for (const std::string& f : fragments) EXPECT_NE(what.find(f), std::string::npos) << what << " / " << f;
  }
}

TEST(CalibrationFile, BadFilesGiveOneLineNamingFileAndKey) {
  expect_error("", {"(top level)"});
  expect_error("a: [1, 2", {"invalid YAML"});
  expect_error("- 1\n- 2\n", {"(top level)", "one YAML map"});
  expect_error(edited("format: minimllm-calibration-1", "format: other"), {"format = other"});
  expect_error(edited("format: minimllm-calibration-1\n", ""), {"format = (missing)", "required"});
  expect_error(edited("  a2: 1.234567890123e-07\n", ""), {"llm.a2 = (missing)", "required"});
  expect_error(edited("  a2: 1.234567890123e-07", "  a2: -1e-7"), {"llm.a2 = -1e-7", ">= 0"});
  expect_error(edited("  a2: 1.234567890123e-07", "  a2: fast"), {"llm.a2 = fast"});
  expect_error(edited("  a2: 1.234567890123e-07", "  a2: .inf"), {"llm.a2 = .inf"});
  expect_error(edited("  a2: 1.234567890123e-07", "  a3: 1e-7"),
               {"llm.a3", "unknown key", "valid keys in llm"});
  expect_error(edited("optimizer: {seconds", "optimizer: {secs"), {"optimizer.secs", "unknown key"});
  expect_error(edited("    bandwidth: 4700000000", "    bandwidth: 0"),
               {"collectives.all_gather.bandwidth = 0", "> 0"});
  expect_error(edited("tokens: [13, 49, 184]", "tokens: [13, 49]"), {"llm.seconds", "as many values"});
  expect_error(edited("{width: 32, heads: 2, layers: 1", "{width: 32.5, heads: 2, layers: 1"),
               {"model.encoder.width = 32.5", "integer"});
  expect_error(edited("llm:\n  a2", "llm: 3\nx:\n  a2"), {"x", "unknown key"});
  expect_error(edited("  forward_share: 0.41", "  forward_share: 1.5"), {"encoder.forward_share = 1.5"});
}

TEST(CalibrationFile, MissingFileAndOtherModelAreInputErrors) {
  EXPECT_THROW(load_calibration("/nonexistent/cal.yaml"), InputError);
  try {
    load_calibration("/nonexistent/cal.yaml");
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/cal.yaml: cannot read"), std::string::npos);
  }
  const Calibration c = sample_calibration();  // llm.vocab 96
  const RunConfig deck = RunConfig{};          // llm.vocab 64
  try {
    apply_calibration(default_cost_model(deck, 100.0, 1), c, deck.model, "cal.yaml");
    ADD_FAILURE() << "a calibration of another model was accepted";
  } catch (const InputError& e) {
    EXPECT_STREQ(
        e.what(),
        "cal.yaml: model.llm.vocab = 96: calibrated for another model (the deck has 64); run minimllm "
        "calibrate on this deck");
  }
}

TEST(CalibrationFile, PathsInDecksAreRelativeToTheDeck) {
  EXPECT_EQ(resolve_against_deck("decks/run.yaml", "cal/m.yaml"), "decks/cal/m.yaml");
  EXPECT_EQ(resolve_against_deck("decks/run.yaml", "../m.yaml"), "m.yaml");
  EXPECT_EQ(resolve_against_deck("run.yaml", "m.yaml"), "m.yaml");
  EXPECT_EQ(resolve_against_deck("decks/run.yaml", "/abs/m.yaml"), "/abs/m.yaml");
  EXPECT_EQ(resolve_against_deck("<embedded quickstart deck>", "m.yaml"), "m.yaml");
}

TEST(CalibrationFile, ApplySetsComputeStepTermsAndMeasuredLinksOnly) {
  Calibration c = sample_calibration();
  c.model = RunConfig{}.model;
  const RunConfig deck;
  const CostModel base = default_cost_model(deck, 100.0, 1);
  const CostModel cost = apply_calibration(base, c, deck.model, "cal.yaml");
  EXPECT_EQ(cost.llm.a2, c.llm.cost.a2);
  ASSERT_EQ(cost.encoders.size(), 1u);  // the vision module
  EXPECT_EQ(cost.encoders[0].compute.c, c.encoder.cost.c);
  EXPECT_EQ(cost.encoders[0].data_per_row, c.data.per_patch);
  EXPECT_EQ(cost.encoders[0].data_per_item, c.data.per_image);
  EXPECT_EQ(cost.step.optimizer, c.optimizer_seconds);
  EXPECT_EQ(cost.step.encoder_forward_share, c.encoder_forward_share);
  c.encoder_forward_share = 0.0;  // a file from before it was measured: the FLOP-based 1/3 stays
  EXPECT_EQ(apply_calibration(base, c, deck.model, "old.yaml").step.encoder_forward_share, 1.0 / 3.0);
  EXPECT_EQ(cost.intra_node.bandwidth, c.all_gather.link.bandwidth);
  // Latencies per message step: an all-gather on the 2 calibrating ranks is one step, an all-reduce two.
  ASSERT_EQ(c.ranks_per_node, 2);
  EXPECT_EQ(cost.intra_node.latency, c.all_gather.link.latency);
  EXPECT_EQ(cost.step.allreduce_intra.latency, c.all_reduce.link.latency / 2);
  EXPECT_EQ(cost.inter_node.bandwidth, base.inter_node.bandwidth);  // between nodes: not measured
  EXPECT_EQ(cost.step.grad_bytes, base.step.grad_bytes);            // the model's own gradient buffer
  EXPECT_EQ(cost.capacity_bytes, 0.0);                              // memory is not calibrated
  // A message's link as measured; between nodes (not measured) the collectives' per-step link.
  EXPECT_EQ(cost.point_to_point(false).latency, c.point_to_point.link.latency);
  EXPECT_EQ(cost.point_to_point(false).bandwidth, c.point_to_point.link.bandwidth);
  EXPECT_EQ(cost.point_to_point(true).bandwidth, cost.inter_node.bandwidth);
  // The tensor-parallel all-reduce per message step on its 2 ranks; other group sizes: the gradient's.
  EXPECT_EQ(cost.tp_allreduce(2).latency, c.tensor_parallel_all_reduce.link.latency / 2);
  EXPECT_EQ(cost.tp_allreduce(2).bandwidth, c.tensor_parallel_all_reduce.link.bandwidth);
  EXPECT_EQ(cost.tp_allreduce(4).bandwidth, cost.step.allreduce_intra.bandwidth);
  EXPECT_EQ(base.point_to_point(false).bandwidth, base.intra_node.bandwidth);  // uncalibrated
}

// ---------------------------------------------------------------------------------------------------
// The whole step's prediction

TEST(StepPrediction, AddsDataGradientAllReduceAndOptimizer) {
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "quickstart");
  const Sampler sampler(config);
  const GlobalBatch batch = sampler.batch(0);
  CostModel cost = default_cost_model(config, 100.0, 8);
  EXPECT_EQ(cost.step.grad_bytes, 4.0 * Model(config.model, 1).parameter_count());
  cost.step.data_c = 1e-4, cost.encoders.at(0).data_per_row = 1e-6, cost.step.data_per_token = 1e-7;
  cost.encoders.at(0).data_per_item = 2e-5;
  cost.step.optimizer = 3e-4;
  for (int world : {1, 3}) {
    SCOPED_TRACE(world);
    const StepPlan plan = make_in_order_plan(batch, world);
    const PlanPrediction phases = predict(plan, batch, cost, world);
    const PlanPrediction step = predict_step(plan, batch, cost, world);
    // Each rank's inputs (the static plan deals samples in order; images stay on their sample's rank).
    double most = 0.0, images_all = 0.0, patches_all = 0.0, rows_all = 0.0;
    for (int r = 0; r < world; ++r) {
      double images = 0.0, patches = 0.0, rows = 0.0;
      for (int s : plan.llm_groups[r].samples) {
        rows += batch.samples[s].tokens(), patches += batch.samples[s].encoder_rows();
        images += batch.samples[s].items.size();
      }
      most = std::max(most, 1e-4 + 2e-5 * images + 1e-6 * patches + 1e-7 * rows);
      images_all += images, patches_all += patches, rows_all += rows;
    }
    EXPECT_DOUBLE_EQ(step.data, most);
    EXPECT_DOUBLE_EQ(step.optimizer, 3e-4);
    EXPECT_DOUBLE_EQ(step.grad_sync, world == 1 ? 0.0 : cost.grad_sync(world));
    EXPECT_GT(cost.grad_sync(3), 2.0 * (2.0 / 3.0) * cost.step.grad_bytes / 10e9);
    // The boundary exchange's route check (one a step; 0 on one rank).
    const double check = route_check_time(cost, world);
    EXPECT_EQ(check > 0.0, world > 1);
    EXPECT_DOUBLE_EQ(step.makespan, phases.makespan + step.data + step.grad_sync + step.optimizer + check);
    EXPECT_DOUBLE_EQ(step.lower_bound,
                     phases.lower_bound + step.grad_sync + step.optimizer + check + 1e-4 +
                         (2e-5 * images_all + 1e-6 * patches_all + 1e-7 * rows_all) / world);
    EXPECT_GE(step.makespan, step.lower_bound * (1 - 1e-12));
    EXPECT_EQ(step.encoder, phases.encoder);
    EXPECT_EQ(step.llm, phases.llm);
  }
}

// ---------------------------------------------------------------------------------------------------
// A deck naming a calibration, and a real (quick) calibration

class CalibratedRun : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("minimllm_cal_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "decks" / "cal");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  // The quickstart deck (2 steps) plus `extra` lines, written to decks/run.yaml.
  std::string write_deck(const std::string& extra) const {
    const std::string path = (dir_ / "decks" / "run.yaml").string();
    std::ofstream(path) << embedded_quickstart_deck() << extra;
    return path;
  }
  fs::path dir_;
};

using testing_support::read_string_attribute;

TEST_F(CalibratedRun, DeckNamingACalibrationUsesIt) {
  RunConfig quick = parse_run_config(embedded_quickstart_deck(), "q");
  Calibration c = sample_calibration();
  c.model = quick.model;
  c.llm.cost = {1e-7, 5e-4, 1e-4};  // far from the FLOP defaults, so the prediction shows which was used
  const std::string text = calibration_to_yaml(c);
  std::ofstream((dir_ / "decks" / "cal" / "m.yaml").string()) << text;

  RunConfig config = load_run_config(write_deck("parallel: {policy: orch, cost_model: cal/m.yaml}\n"));
  config.steps = 2;
  config.machine.peak_gflops = 100.0;
  TrainOptions options;
  options.out_path = (dir_ / "run.h5").string();
  const TrainResult result = train(config, World::of(MPI_COMM_SELF), options);
  const std::string resolved = (dir_ / "decks" / "cal" / "m.yaml").lexically_normal().string();
  EXPECT_EQ(result.cost_model_source, resolved);
  EXPECT_EQ(read_string_attribute(options.out_path, "cost_model_source"), resolved);
  EXPECT_EQ(read_string_attribute(options.out_path, "calibration"), text);

  // The predicted step is the calibrated one: LLM per sample, data, optimizer (one rank: no all-reduce).
  const Sampler sampler(config);
  const GlobalBatch batch = sampler.batch(0);
  double expected = c.data.c + c.optimizer_seconds;
  for (const SampleMeta& s : batch.samples) {
    expected += c.llm.cost(s.tokens()) + c.data.per_image * s.items.size() +
                c.data.per_patch * s.encoder_rows() + c.data.per_token * s.tokens();
    for (const EncoderItem& im : s.items) expected += c.encoder.cost(im.rows);
  }
  // One rank: the boundary exchange has no peer, so no message latency.
  EXPECT_NEAR(result.steps[0].predicted_seconds, expected, 1e-9 * expected);

  // Without one, the source says so and there is no calibration text.
  config.parallel.cost_model.clear();
  options.out_path = (dir_ / "plain.h5").string();
  EXPECT_EQ(train(config, World::of(MPI_COMM_SELF), options).cost_model_source, "default-from-FLOPs");
  EXPECT_EQ(read_string_attribute(options.out_path, "cost_model_source"), "default-from-FLOPs");
}

TEST_F(CalibratedRun, MissingOrBadCalibrationFailsBeforeAnyOutput) {
  RunConfig config = load_run_config(write_deck("parallel: {cost_model: cal/none.yaml}\n"));
  config.machine.peak_gflops = 100.0;
  TrainOptions options;
  options.out_path = (dir_ / "none.h5").string();
  try {
    train(config, World::of(MPI_COMM_SELF), options);
    ADD_FAILURE() << "a missing calibration file was accepted";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("run.yaml: parallel.cost_model = cal/none.yaml: no calibration file at "),
              std::string::npos)
        << what;
  }
  EXPECT_FALSE(fs::exists(options.out_path));
  std::ofstream((dir_ / "decks" / "cal" / "none.yaml").string()) << "format: minimllm-calibration-1\n";
  EXPECT_THROW(train(config, World::of(MPI_COMM_SELF), options), InputError);
  EXPECT_FALSE(fs::exists(options.out_path));
}

TEST(Calibrate, QuickCalibrationOfATinyDeckIsSaneAndRoundTrips) {
  RunConfig config = parse_run_config(embedded_quickstart_deck(), "quickstart");
  config.steps = 2;
  CalibrateOptions options;
  options.sizes = 3, options.repeats = 1;
  const Calibration c = calibrate(config, World::of(MPI_COMM_WORLD), options);
  EXPECT_EQ(c.llm.points.sizes.size(), 3u);
  EXPECT_GE(c.encoder.points.sizes.size(), 3u);
  EXPECT_GT(c.llm.cost(100.0), 0.0);
  EXPECT_GT(c.encoder.cost(16.0), 0.0);
  EXPECT_GT(c.optimizer_seconds, 0.0);
  EXPECT_GT(c.encoder_forward_share,
            0.0);  // measured: a forward is part of, never all of, the encoder's time
  EXPECT_LT(c.encoder_forward_share, 1.0);
  EXPECT_EQ(c.parameters, static_cast<long long>(Model(config.model, 1).parameter_count()));
  EXPECT_FALSE(c.inter_all_gather.measured);  // one node
  const Calibration back = parse_calibration(calibration_to_yaml(c), "quick.yaml");
  EXPECT_EQ(back.llm.cost.a1, c.llm.cost.a1);
  EXPECT_EQ(back.encoder_forward_share, c.encoder_forward_share);
  EXPECT_NO_THROW(apply_calibration(default_cost_model(config, 100.0, 1), back, config.model, "quick.yaml"));
}

}  // namespace
}  // namespace minimllm
