#include "minimllm/driver/trainer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <tuple>
#include <utility>

#include "minimllm/core/clock.hpp"
#include "minimllm/core/device.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/driver/provenance.hpp"
#include "minimllm/driver/step_executor.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/optimizer.hpp"
#include "minimllm/metrics/device_peak.hpp"
#include "minimllm/metrics/hdf5_writer.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/parallel/comm_pool.hpp"
#include "minimllm/plan/layout_source.hpp"
#include "minimllm/plan/rank_work.hpp"
#include "minimllm/plan/step_plan.hpp"

#ifndef MINIMLLM_VERSION
#define MINIMLLM_VERSION "unknown"
#endif

namespace minimllm {
namespace {

// Dense rate of this rank's GEMM in the run's precision, used as the MFU peak when the deck gives none
// and the device is not in the datasheet table.
double measure_gemm_gflops(GemmPrecision precision) {
  const int n = 1024;
  t_mat a("peak::a", n, n), b("peak::b", n, n), c("peak::c", n, n);
  Kokkos::deep_copy(a, 1.0f), Kokkos::deep_copy(b, 1.0f);
  gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c, precision);  // warm-up
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now_seconds();
    gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c, precision);
    best = std::min(best, now_seconds() - t0);
  }
  return 2.0 * n * n * n / best * 1e-9;
}

// The MFU denominator per rank, the same on every rank (the planners depend on it): the deck's value;
// else the datasheet dense peak of the precision when every rank's GPU is in the table (the smallest,
// divided among the ranks that share one GPU); else this rank's measured GEMM rate, averaged over ranks.
std::pair<double, std::string> choose_peak(const RunConfig& config, GemmPrecision precision,
                                           const World& world) {
  if (config.runtime.peak_gflops_per_rank > 0.0)
    return {config.runtime.peak_gflops_per_rank, "deck runtime.peak_gflops_per_rank"};
  const std::string device = device_name();
  const auto datasheet =
      dense_peak_gflops(device, precision == GemmPrecision::bf16 ? Precision::bf16 : Precision::fp32);
  // Collective on every rank whatever its own answer: a rank whose GPU is unknown makes all measure.
  const int sharing = ranks_sharing_device(world.comm);
  const double local_per_rank = datasheet ? *datasheet / sharing : 0.0;
  double smallest = 0.0;
  const int known = datasheet ? 1 : 0;
  int all_known = 0;
  MPI_Allreduce(&known, &all_known, 1, MPI_INT, MPI_MIN, world.comm);
  if (all_known) {
    MPI_Allreduce(&local_per_rank, &smallest, 1, MPI_DOUBLE, MPI_MIN, world.comm);
    std::string source = fmt::format("datasheet dense {} peak of {}", to_string(precision), device);
    if (sharing > 1) source += fmt::format(", shared by {} ranks", sharing);
    return {smallest, source};
  }
  double local = measure_gemm_gflops(precision), sum = 0.0;
  MPI_Allreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, world.comm);
  return {sum / world.size,
          fmt::format("measured: {} GEMM 1024^3 ({}) with {} BLAS thread(s), mean over ranks",
                      to_string(default_gemm_backend()), to_string(precision), config.runtime.blas_threads)};
}

// Rank 0 opens the output; every rank learns whether that worked, so all fail alike (exit code 2).
std::unique_ptr<Hdf5RunWriter> open_output(const TrainOptions& options, const World& world) {
  std::unique_ptr<Hdf5RunWriter> writer;
  std::string error;
  int kind = 0;  // 0 ok, 1 input error, 2 runtime error
  if (world.is_root() && !options.out_path.empty()) {
    try {
      writer = std::make_unique<Hdf5RunWriter>(options.out_path, options.overwrite);
    } catch (const InputError& e) {
      kind = 1, error = e.what();
    } catch (const std::exception& e) {
      kind = 2, error = e.what();
    }
  }
  MPI_Bcast(&kind, 1, MPI_INT, 0, world.comm);
  if (kind == 0) return writer;
  int length = static_cast<int>(error.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, world.comm);
  error.resize(length);
  MPI_Bcast(error.data(), length, MPI_CHAR, 0, world.comm);
  if (kind == 1) throw InputError(error);
  throw std::runtime_error(error);
}

void write_provenance(Hdf5RunWriter& out, const RunConfig& config, const TrainResult& r, double param_count,
                      std::vector<RunAttribute> attributes) {
  attributes.push_back({"gemm_backend", std::string(to_string(default_gemm_backend()))});
  attributes.push_back({"placement", config.parallel.placement});
  attributes.push_back({"policy", config.parallel.policy});
  attributes.push_back({"parameters", static_cast<long long>(param_count)});
  attributes.push_back({"peak_gflops_per_rank", r.peak_gflops_per_rank});
  attributes.push_back({"peak_source", r.peak_source});
  attributes.push_back({"memory_estimate_mib", r.memory_estimate_mib});
  attributes.push_back({"precision", r.precision});
  attributes.push_back({"collectives", r.collectives});
  attributes.push_back({"collectives_reason", r.collectives_reason});
  out.set_run_attributes(attributes);
}

// Largest activation footprint of this rank over all steps (LLM rows of one micro-batch, gathered key
// rows under context parallelism, encoder patches), max over ranks: for the analytic memory estimate.
struct PeakWork {
  std::int64_t llm_rows = 0, key_rows = 0, patches = 0;
};
PeakWork peak_work(const RunConfig& config, const Sampler& sampler, const Model& model, const World& world,
                   const LayoutSource& layouts) {
  PeakWork peak;
  for (int step = 0; step < config.steps; ++step) {
    const GlobalBatch batch = sampler.batch(step);
    const RankWork work = derive_rank_work(layouts.plan(batch), batch, world.rank, world.size,
                                           model.linear_weight_in_attention_pairs());
    for (const MicroBatchWork& mb : work.micro_batches) {
      std::int64_t rows = 0;
      for (const SequenceChunk& c : mb.chunks) rows += c.end - c.begin;
      peak.llm_rows = std::max(peak.llm_rows, rows);
      if (work.group_ranks.size() > 1)
        peak.key_rows = std::max<std::int64_t>(peak.key_rows, mb.sample_offsets.back());
    }
    std::int64_t patches = 0;
    const std::vector<int> first_image = first_image_of_samples(batch);
    for (size_t s = 0; s < batch.samples.size(); ++s)
      for (size_t i = 0; i < batch.samples[s].images.size(); ++i)
        if (std::binary_search(work.images.begin(), work.images.end(), first_image[s] + static_cast<int>(i)))
          patches += batch.samples[s].images[i].patches;
    peak.patches = std::max(peak.patches, patches);
  }
  std::int64_t values[3] = {peak.llm_rows, peak.key_rows, peak.patches};
  MPI_Allreduce(MPI_IN_PLACE, values, 3, MPI_INT64_T, MPI_MAX, world.comm);
  return {values[0], values[1], values[2]};
}

// Per-rank values of one step, in the order of kRankFields.
constexpr const char* kRankFields[] = {"step_seconds",        "planning_seconds",  "data_seconds",
                                       "encoder_seconds",     "boundary_seconds",  "llm_seconds",
                                       "kv_exchange_seconds", "grad_sync_seconds", "optimizer_seconds",
                                       "model_flops",         "llm_rows",          "encoder_rows"};
constexpr int kRankFieldCount = sizeof(kRankFields) / sizeof(kRankFields[0]);

// This rank's values of kRankFields, gathered to rank 0 (row-major [rank][field]; empty elsewhere).
std::vector<double> gather_rank_values(const World& world, const std::array<double, kRankFieldCount>& mine) {
  std::vector<double> all(world.is_root() ? kRankFieldCount * world.size : 0);
  MPI_Gather(mine.data(), kRankFieldCount, MPI_DOUBLE, all.data(), kRankFieldCount, MPI_DOUBLE, 0,
             world.comm);
  return all;
}

// /ranks/<field> [steps, ranks], so imbalance and idle time can be seen.
void write_rank_tables(Hdf5RunWriter& out, int ranks, const std::vector<double>& all) {
  for (int f = 0; f < kRankFieldCount; ++f) {
    std::vector<double> column(ranks);
    for (int r = 0; r < ranks; ++r) column[r] = all[r * kRankFieldCount + f];
    out.append_row(std::string("/ranks/") + kRankFields[f], column);
  }
}

// /plans: the step's plan, identical on every rank, so rank 0 writes it without messages. Groups are
// numbered in plan order: llm_group_of_rank [steps, ranks] (-1: no LLM work), llm_group_size and
// llm_group_samples [steps, ranks] (column g: group g; 0 past the last group), encoder_images_of_rank
// [steps, ranks], and policy [steps], a code into PolicyCodes::names (its attribute `names`).
struct PolicyCodes {
  std::vector<std::string> names = policy_names();  // extended when a plan names a policy not in it
  size_t named = 0;                                 // names written to the attribute so far
};
void write_plan_tables(Hdf5RunWriter& out, const StepPlan& plan, int world_size, PolicyCodes& codes) {
  std::vector<int> group_of_rank(world_size, -1), group_size(world_size, 0), group_samples(world_size, 0),
      images_of_rank(world_size, 0);
  for (size_t g = 0; g < plan.llm_groups.size(); ++g) {
    for (int r : plan.llm_groups[g].ranks) group_of_rank[r] = static_cast<int>(g);
    group_size[g] = static_cast<int>(plan.llm_groups[g].ranks.size());
    group_samples[g] = static_cast<int>(plan.llm_groups[g].samples.size());
  }
  for (int owner : plan.image_owner) ++images_of_rank[owner];
  out.append_row("/plans/llm_group_of_rank", group_of_rank);
  out.append_row("/plans/llm_group_size", group_size);
  out.append_row("/plans/llm_group_samples", group_samples);
  out.append_row("/plans/encoder_images_of_rank", images_of_rank);
  auto code = std::find(codes.names.begin(), codes.names.end(), plan.policy);
  if (code == codes.names.end()) code = codes.names.insert(codes.names.end(), plan.policy);
  out.append_value("/plans/policy", static_cast<int>(code - codes.names.begin()));
  if (codes.named != codes.names.size()) {
    out.set_table_attribute("/plans/policy", "names", fmt::format("{}", fmt::join(codes.names, ", ")));
    codes.named = codes.names.size();
  }
}

void print_banner(std::ostream& log, const RunConfig& config, const World& world, const Model& model,
                  const TrainResult& r, const PeakWork& peak, const std::vector<RunAttribute>& provenance) {
  const ModelConfig& m = config.model;
  log << fmt::format("minimllm {} | deck {} ({}) | {} MPI ranks | {} | BLAS threads/rank {}\n",
                     MINIMLLM_VERSION, config.name, config.deck_path, world.size, kokkos_description(),
                     config.runtime.blas_threads);
  log << provenance_summary(provenance) << "\n";
  log << fmt::format(
      "model: encoder {}x{} (heads {}, patch {}) -> LLM {}x{} (heads {}, vocab {}) | {:.3f} M parameters\n",
      m.encoder.layers, m.encoder.width, m.encoder.heads, m.encoder.patch, m.llm.layers, m.llm.width,
      m.llm.heads, m.llm.vocab, model.parameter_count() / 1e6);
  const ParallelConfig& p = config.parallel;
  const std::string layout =
      p.policy != "deck"
          ? fmt::format("policy {} (cost model: {})", p.policy,
                        r.cost_model_source == "default-from-FLOPs"
                            ? fmt::format("{} at {:.1f} GFLOP/s per rank", r.cost_model_source,
                                          r.peak_gflops_per_rank)
                            : r.cost_model_source)
          : fmt::format(
                "deck: {} placement, LLM groups [{}]{}, micro-batches {}", p.placement,
                p.group_sizes.empty() ? "1 per rank" : fmt::format("{}", fmt::join(p.group_sizes, ", ")),
                p.rotate_groups ? " rotating every step" : "", p.micro_batches);
  log << fmt::format("data: global batch {} samples, {} steps, seed {} | layout: {} | comm pool {}\n",
                     config.data.global_batch, config.steps, config.seed, layout, p.comm_pool_capacity);
  log << fmt::format("precision: {} GEMMs | collectives: {} ({})\n", r.precision, r.collectives,
                     r.collectives_reason);
  log << fmt::format("peak for MFU: {:.1f} GFLOP/s per rank ({})\n", r.peak_gflops_per_rank, r.peak_source);
  log << fmt::format(
      "memory estimate per rank: {:.1f} MiB (parameters, gradients, AdamW state; activations "
      "for up to {} LLM rows, {} gathered key rows, {} patches)\n",
      r.memory_estimate_mib, peak.llm_rows, peak.key_rows, peak.patches);
}

void print_step(std::ostream& log, const StepRecord& s, int steps) {
  log << fmt::format(
      "step {:>5}/{}  loss {:.4f}  tokens {:>7} (text {}, image {})  {:8.1f} ms  {:>10.0f} tok/s  "
      "MFU {:5.1f}%\n",
      s.step, steps, s.loss, s.text_tokens + s.image_tokens, s.text_tokens, s.image_tokens,
      1e3 * s.step_seconds, s.tokens_per_second, 100.0 * s.mfu);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void print_summary(std::ostream& log, const TrainResult& r, const World& world, const std::string& out_path) {
  // Step 0 is a warm-up (first-touch allocations, BLAS buffers): rates use the steps after it.
  std::vector<double> times, rates, mfus;
  for (size_t i = r.steps.size() > 1 ? 1 : 0; i < r.steps.size(); ++i) {
    times.push_back(r.steps[i].step_seconds);
    rates.push_back(r.steps[i].tokens_per_second);
    mfus.push_back(r.steps[i].mfu);
  }
  const StepRecord &first = r.steps.front(), &last = r.steps.back();
  log << fmt::format(
      "summary: loss {:.4f} -> {:.4f} over {} steps | median step {:.1f} ms | median {:.0f} tok/s "
      "({:.0f} per rank) | median MFU {:.1f}%\n",
      first.loss, last.loss, r.steps.size(), 1e3 * median(times), median(rates), median(rates) / world.size,
      100.0 * median(mfus));
  if (!out_path.empty()) {
    // Step 0 also creates every table; the median is the steady cost of a step.
    const std::vector<double> later(r.output_seconds.begin() + (r.output_seconds.size() > 1),
                                    r.output_seconds.end());
    double total = 0.0;
    for (double t : r.output_seconds) total += t;
    log << fmt::format(
        "output: HDF5 writes on rank 0: median {:.3f} ms per step ({:.3f}% of the median step), first step "
        "{:.3f} ms; {:.3f}% of the run's wall time in all\n",
        1e3 * median(later), 100.0 * median(later) / median(times), 1e3 * r.output_seconds.front(),
        100.0 * total / r.loop_seconds);
  }
  log << fmt::format(
      "memory per rank: peak resident {:.1f} MiB, analytic estimate {:.1f} MiB (ratio {:.2f})\n",
      r.peak_resident_mib, r.memory_estimate_mib, r.peak_resident_mib / r.memory_estimate_mib);
  if (!out_path.empty()) log << "metrics written to " << out_path << "\n";
  log << fmt::format(
      "minimllm PERFORMANCE tokens_per_second={:.1f} tokens_per_second_per_rank={:.1f} mfu={:.4f} "
      "ranks={}\n",
      median(rates), median(rates) / world.size, median(mfus), world.size);
}

// Median of a StepRecord field over the steps after the warm-up.
template <class Field>
double median_after_warmup(const TrainResult& r, Field field) {
  std::vector<double> values;
  for (size_t i = r.steps.size() > 1 ? 1 : 0; i < r.steps.size(); ++i) values.push_back(field(r.steps[i]));
  return median(values);
}

}  // namespace

void print_policy_comparison(std::ostream& out,
                             const std::vector<std::pair<std::string, TrainResult>>& runs) {
  if (runs.empty()) return;
  const auto tps = [](const StepRecord& s) { return s.tokens_per_second; };
  const double base_tps = median_after_warmup(runs.front().second, tps);
  const double base_loss = runs.front().second.steps.back().loss;
  out << fmt::format("\npolicy comparison (same data; rates from steps after the warm-up; vs {}):\n",
                     runs.front().first);
  out << fmt::format("{:<8} {:>10} {:>11} {:>8} {:>13} {:>10} {:>11} {:>11} {:>12}\n", "policy", "step ms",
                     "tokens/s", "speed-up", "predicted ms", "pred/meas", "pred./LB", "last loss",
                     "loss diff");
  for (const auto& [policy, r] : runs) {
    const double step = median_after_warmup(r, [](const StepRecord& s) { return s.step_seconds; });
    const double predicted = median_after_warmup(r, [](const StepRecord& s) { return s.predicted_seconds; });
    const double ratio = median_after_warmup(r, [](const StepRecord& s) {
      return s.lower_bound_seconds > 0 ? s.predicted_seconds / s.lower_bound_seconds : 0.0;
    });
    const double loss = r.steps.back().loss;
    out << fmt::format(
        "{:<8} {:>10.1f} {:>11.0f} {:>7.2f}x {:>13.2f} {:>10.3f} {:>11.3f} {:>11.5f} {:>12.1e}\n", policy,
        1e3 * step, median_after_warmup(r, tps), median_after_warmup(r, tps) / base_tps, 1e3 * predicted,
        predicted / step, ratio, loss, std::abs(loss - base_loss) / base_loss);
  }
}

TrainResult train(const RunConfig& config, const World& world, const TrainOptions& options) {
  std::ostream* log = world.is_root() ? options.log : nullptr;
  // This run's own memory peak, not an earlier run's in the same process (--policy all).
  const bool own_peak = reset_peak_resident();
  set_blas_threads(config.runtime.blas_threads);
  const Sampler sampler(config);
  const GemmPrecision precision = gemm_precision_from_string(config.runtime.precision);
  Model model(config.model, config.seed, precision);
  TrainResult result;
  result.precision = to_string(precision);
  std::tie(result.peak_gflops_per_rank, result.peak_source) = choose_peak(config, precision, world);
  // Chosen once, for every collective of the run (pool groups, the world's gradient all-reduce and
  // boundary exchange): NCCL on device memory where it can, MPI otherwise.
  const CollectivesChoice collectives = choose_collectives(world.comm, config.runtime.collectives);
  result.collectives = collectives.backend;
  result.collectives_reason = collectives.reason;
  const int per_node =
      config.parallel.ranks_per_node > 0 ? config.parallel.ranks_per_node : ranks_per_node(world);
  const CostModelChoice cost =
      choose_cost_model(config, world, result.peak_gflops_per_rank, per_node, options.cost_model);
  result.cost_model_source = cost.source;
  const LayoutSource layouts(config, world.size, cost.model);
  // Every step's layout is derived before anything is written: a deck whose layout cannot fit this
  // run fails here (InputError) and leaves no output file.
  const PeakWork peak = peak_work(config, sampler, model, world, layouts);
  model.reserve_workspace(peak.llm_rows, peak.key_rows);
  std::unique_ptr<Hdf5RunWriter> out = open_output(options, world);
  t_vec adam_m("adamw::m", model.parameter_count()), adam_v("adamw::v", model.parameter_count());

  const double state_bytes = 4.0 * 4.0 * model.parameter_count();  // params, grads, AdamW m and v
  result.memory_estimate_mib =
      (state_bytes + model.activation_bytes(peak.llm_rows, peak.patches, peak.key_rows)) / 1048576.0;
  const std::vector<RunAttribute> provenance = gather_provenance(config, world, options.command_line);
  if (log) print_banner(*log, config, world, model, result, peak, provenance);
  if (out) write_provenance(*out, config, result, model.parameter_count(), provenance);
  if (out) {
    out->set_run_attribute("cost_model_source", cost.source);
    out->set_run_attribute("predicted_columns",
                           "step_s, data_s, encoder_s, boundary_s, llm_s, grad_sync_s, optimizer_s");
    if (!cost.calibration_text.empty()) out->set_run_attribute("calibration", cost.calibration_text);
  }

  CommPool pool(world.comm, config.parallel.comm_pool_capacity, collectives.factory);
  StepExecutor executor(sampler, model, world, pool);
  PolicyCodes policy_codes;
  const double t_loop = now_seconds();
  double t_timed = t_loop;  // end of the warm-up step
  for (int step = 0; step < config.steps; ++step) {
    const double t_start = now_seconds();
    const GlobalBatch batch = sampler.batch(step);
    const StepPlan plan = layouts.plan(batch);
    const double t_plan = now_seconds();
    const PlanPrediction predicted = layouts.predict(plan, batch);
    const CommPoolStats pool_before = pool.stats();
    const StepOutcome outcome = executor.run(batch, plan);
    const double t_executed = now_seconds();

    const OptimizerConfig& o = config.optimizer;
    const float warmup = o.warmup_steps > 0 ? std::min(1.0f, (step + 1.0f) / o.warmup_steps) : 1.0f;
    AdamWHyper hyper{o.lr * warmup, o.beta1, o.beta2, o.eps, o.weight_decay};
    const auto decayed = std::make_pair(std::size_t(0), model.decayed_count());
    const auto rest = std::make_pair(model.decayed_count(), model.parameter_count());
    adamw_update(Kokkos::subview(model.params(), decayed), Kokkos::subview(model.grads(), decayed),
                 Kokkos::subview(adam_m, decayed), Kokkos::subview(adam_v, decayed), hyper, step + 1);
    hyper.weight_decay = 0.0f;  // norm weights are not decayed
    adamw_update(Kokkos::subview(model.params(), rest), Kokkos::subview(model.grads(), rest),
                 Kokkos::subview(adam_m, rest), Kokkos::subview(adam_v, rest), hyper, step + 1);
    const double t_end = now_seconds();

    // Per-rank values go to rank 0 first: this collective, not the timed output below, absorbs any wait
    // for a rank that is late (e.g. descheduled on a shared node).
    const std::vector<double> rank_values = gather_rank_values(
        world, {t_end - t_start, t_plan - t_start, outcome.data_seconds, outcome.encoder_seconds,
                outcome.boundary_seconds, outcome.llm_seconds, outcome.kv_exchange_seconds,
                outcome.grad_sync_seconds, t_end - t_executed, outcome.flops,
                static_cast<double>(outcome.llm_rows), static_cast<double>(outcome.encoder_rows)});
    // Times: max over ranks (the slowest rank sets the pace); counts and FLOPs: sums over ranks.
    const CommPoolStats& pool_now = pool.stats();
    double maxima[10] = {t_end - t_start,
                         t_plan - t_start,
                         outcome.data_seconds,
                         outcome.encoder_seconds,
                         outcome.llm_seconds,
                         outcome.boundary_seconds,
                         outcome.grad_sync_seconds,
                         t_end - t_executed,
                         pool_now.creation_seconds - pool_before.creation_seconds,
                         outcome.kv_exchange_seconds};
    MPI_Allreduce(MPI_IN_PLACE, maxima, 10, MPI_DOUBLE, MPI_MAX, world.comm);
    double sums[5] = {outcome.flops, static_cast<double>(outcome.boundary_bytes),
                      static_cast<double>(pool_now.hits - pool_before.hits),
                      static_cast<double>(pool_now.creations - pool_before.creations),
                      static_cast<double>(pool_now.evictions - pool_before.evictions)};
    MPI_Allreduce(MPI_IN_PLACE, sums, 5, MPI_DOUBLE, MPI_SUM, world.comm);

    StepRecord s;
    s.step = step;
    s.loss = outcome.loss_sum / static_cast<double>(std::max<std::int64_t>(1, batch.loss_targets()));
    s.text_tokens = batch.text_tokens();
    s.image_tokens = batch.image_tokens();
    s.loss_targets = batch.loss_targets();
    s.samples = static_cast<int>(batch.samples.size());
    s.step_seconds = maxima[0], s.planning_seconds = maxima[1], s.data_seconds = maxima[2];
    s.encoder_seconds = maxima[3], s.llm_seconds = maxima[4], s.boundary_seconds = maxima[5];
    s.grad_sync_seconds = maxima[6], s.optimizer_seconds = maxima[7], s.comm_creation_seconds = maxima[8];
    s.kv_exchange_seconds = maxima[9];
    s.tokens_per_second = (s.text_tokens + s.image_tokens) / s.step_seconds;
    s.model_flops = sums[0];
    s.mfu = sums[0] / s.step_seconds / (result.peak_gflops_per_rank * 1e9 * world.size);
    s.boundary_bytes = static_cast<std::int64_t>(sums[1]);
    s.comm_hits = static_cast<std::int64_t>(sums[2]);
    s.comm_creations = static_cast<std::int64_t>(sums[3]);
    s.comm_evictions = static_cast<std::int64_t>(sums[4]);
    s.predicted_seconds = predicted.makespan;
    s.lower_bound_seconds = predicted.lower_bound;
    s.llm_groups = static_cast<int>(plan.llm_groups.size());
    for (const LlmGroup& g : plan.llm_groups)
      s.max_group_size = std::max<int>(s.max_group_size, g.ranks.size());
    // Rank 0's HDF5 output, timed: the per-rank and plan tables, then the /steps row and the flush.
    const double t_output = now_seconds();
    if (out) {
      write_rank_tables(*out, world.size, rank_values);
      write_plan_tables(*out, plan, world.size, policy_codes);
      // The prediction's terms beside the measured /steps phases (same order as there where both exist).
      out->append_row("/predicted", std::vector<double>{predicted.makespan, predicted.data, predicted.encoder,
                                                        predicted.boundary, predicted.llm,
                                                        predicted.grad_sync, predicted.optimizer});
    }
    s.output_seconds = now_seconds() - t_output;  // the row's own append and flush follow
    if (out) out->append_step(s);
    const double t_written = now_seconds();
    result.output_seconds.push_back(t_written - t_output);
    result.steps.push_back(s);
    if (log) print_step(*log, s, config.steps);
    if (step == 0) t_timed = t_written;
  }
  double loop[2] = {now_seconds() - t_loop, now_seconds() - t_timed};
  MPI_Allreduce(MPI_IN_PLACE, loop, 2, MPI_DOUBLE, MPI_MAX, world.comm);
  result.loop_seconds = loop[0];
  result.timed_seconds = config.steps > 1 ? loop[1] : loop[0];
  double rss = peak_resident_mib();
  MPI_Allreduce(MPI_IN_PLACE, &rss, 1, MPI_DOUBLE, MPI_MAX, world.comm);
  result.peak_resident_mib = rss;
  if (out) {
    out->set_run_attribute("peak_resident_mib", rss);
    out->set_run_attribute("peak_resident_scope",
                           own_peak ? "this run" : "the process so far (the peak could not be reset)");
  }
  if (log) print_summary(*log, result, world, options.out_path);
  return result;
}

}  // namespace minimllm
