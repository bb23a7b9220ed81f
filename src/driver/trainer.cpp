#include "minimllm/driver/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <ostream>

#include "minimllm/data/packed_batch.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/optimizer.hpp"
#include "minimllm/metrics/hdf5_writer.hpp"
#include "minimllm/model/model.hpp"

#ifndef MINIMLLM_VERSION
#define MINIMLLM_VERSION "unknown"
#endif

namespace minimllm {
namespace {

double now_seconds() {
  Kokkos::fence();  // a phase ends when its kernels have
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Dense fp32 rate of this rank's BLAS, used as the MFU peak when the deck gives none.
double measure_sgemm_gflops() {
  const int n = 1024;
  t_mat a("peak::a", n, n), b("peak::b", n, n), c("peak::c", n, n);
  Kokkos::deep_copy(a, 1.0f), Kokkos::deep_copy(b, 1.0f);
  gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c);  // warm-up
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const double t0 = now_seconds();
    gemm(Trans::no, Trans::no, 1.0f, a, b, 0.0f, c);
    best = std::min(best, now_seconds() - t0);
  }
  return 2.0 * n * n * n / best * 1e-9;
}

// Sums a host-accessible buffer over the world in place; device buffers go through a host mirror.
void allreduce_sum(const t_vec& v, MPI_Comm comm) {
  if constexpr (kMemSpaceIsHostAccessible) {
    MPI_Allreduce(MPI_IN_PLACE, v.data(), static_cast<int>(v.extent(0)), MPI_FLOAT, MPI_SUM, comm);
  } else {
    auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
    MPI_Allreduce(MPI_IN_PLACE, host.data(), static_cast<int>(host.extent(0)), MPI_FLOAT, MPI_SUM, comm);
    Kokkos::deep_copy(v, host);
  }
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

void write_provenance(Hdf5RunWriter& out, const RunConfig& config, const World& world, const TrainResult& r,
                      double param_count) {
  out.set_run_attribute("name", config.name);
  out.set_run_attribute("deck_path", config.deck_path);
  out.set_run_attribute("deck_text", config.deck_text);
  out.set_run_attribute("minimllm_version", MINIMLLM_VERSION);
  out.set_run_attribute("kokkos", kokkos_description());
  out.set_run_attribute("mpi_library", mpi_library_version());
  out.set_run_attribute("hostname", host_name());
  out.set_run_attribute("ranks", static_cast<long long>(world.size));
  out.set_run_attribute("gemm_backend", to_string(default_gemm_backend()));
  out.set_run_attribute("layout", "static data parallel");
  out.set_run_attribute("parameters", static_cast<long long>(param_count));
  out.set_run_attribute("peak_gflops_per_rank", r.peak_gflops_per_rank);
  out.set_run_attribute("peak_source", r.peak_source);
  out.set_run_attribute("memory_estimate_mib", r.memory_estimate_mib);
}

// Largest per-rank token and patch counts over all steps, for the analytic memory estimate.
std::pair<std::int64_t, std::int64_t> max_local_work(const Sampler& sampler, int steps, const World& world) {
  std::int64_t tokens = 0, patches = 0;
  for (int step = 0; step < steps; ++step) {
    const GlobalBatch batch = sampler.batch(step);
    for (int r = 0; r < world.size; ++r) {
      const auto [first, last] = static_share(static_cast<int>(batch.samples.size()), r, world.size);
      std::int64_t t = 0, p = 0;
      for (int i = first; i < last; ++i) t += batch.samples[i].tokens(), p += batch.samples[i].image_tokens();
      tokens = std::max(tokens, t), patches = std::max(patches, p);
    }
  }
  return {tokens, patches};
}

void print_banner(std::ostream& log, const RunConfig& config, const World& world, const Model& model,
                  const TrainResult& r, const std::pair<std::int64_t, std::int64_t>& max_work) {
  const ModelConfig& m = config.model;
  log << fmt::format("minimllm {} | deck {} ({}) | {} MPI ranks | {} | BLAS threads/rank {}\n", MINIMLLM_VERSION,
                     config.name, config.deck_path, world.size, kokkos_description(), config.runtime.blas_threads);
  log << fmt::format(
      "model: encoder {}x{} (heads {}, patch {}) -> LLM {}x{} (heads {}, vocab {}) | {:.3f} M parameters\n",
      m.encoder.layers, m.encoder.width, m.encoder.heads, m.encoder.patch, m.llm.layers, m.llm.width, m.llm.heads,
      m.llm.vocab, model.parameter_count() / 1e6);
  log << fmt::format("data: global batch {} samples, {} steps, seed {} | layout: static data parallel\n",
                     config.data.global_batch, config.steps, config.seed);
  log << fmt::format("peak for MFU: {:.1f} GFLOP/s per rank ({})\n", r.peak_gflops_per_rank, r.peak_source);
  log << fmt::format("memory estimate per rank: {:.1f} MiB (parameters, gradients, AdamW state; activations "
                     "for up to {} tokens and {} patches)\n",
                     r.memory_estimate_mib, max_work.first, max_work.second);
}

void print_step(std::ostream& log, const StepRecord& s, int steps) {
  log << fmt::format("step {:>5}/{}  loss {:.4f}  tokens {:>7} (text {}, image {})  {:8.1f} ms  {:>10.0f} tok/s  "
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
  log << fmt::format("summary: loss {:.4f} -> {:.4f} over {} steps | median step {:.1f} ms | median {:.0f} tok/s "
                     "({:.0f} per rank) | median MFU {:.1f}%\n",
                     first.loss, last.loss, r.steps.size(), 1e3 * median(times), median(rates),
                     median(rates) / world.size, 100.0 * median(mfus));
  log << fmt::format("memory per rank: peak resident {:.1f} MiB, analytic estimate {:.1f} MiB (ratio {:.2f})\n",
                     r.peak_resident_mib, r.memory_estimate_mib, r.peak_resident_mib / r.memory_estimate_mib);
  if (!out_path.empty()) log << "metrics written to " << out_path << "\n";
  log << fmt::format("minimllm PERFORMANCE tokens_per_second={:.1f} tokens_per_second_per_rank={:.1f} mfu={:.4f} "
                     "ranks={}\n",
                     median(rates), median(rates) / world.size, median(mfus), world.size);
}

}  // namespace

std::pair<int, int> static_share(int n, int rank, int ranks) {
  const int base = n / ranks, extra = n % ranks;
  const int first = rank * base + std::min(rank, extra);
  return {first, first + base + (rank < extra ? 1 : 0)};
}

TrainResult train(const RunConfig& config, const World& world, const TrainOptions& options) {
  std::unique_ptr<Hdf5RunWriter> out = open_output(options, world);
  std::ostream* log = world.is_root() ? options.log : nullptr;
  set_blas_threads(config.runtime.blas_threads);

  const Sampler sampler(config);
  Model model(config.model, config.seed);
  t_vec adam_m("adamw::m", model.parameter_count()), adam_v("adamw::v", model.parameter_count());

  TrainResult result;
  if (config.runtime.peak_gflops_per_rank > 0.0) {
    result.peak_gflops_per_rank = config.runtime.peak_gflops_per_rank;
    result.peak_source = "deck runtime.peak_gflops_per_rank";
  } else {
    double local = measure_sgemm_gflops(), sum = 0.0;
    MPI_Allreduce(&local, &sum, 1, MPI_DOUBLE, MPI_SUM, world.comm);
    result.peak_gflops_per_rank = sum / world.size;
    result.peak_source = fmt::format("measured: BLAS sgemm 1024^3 with {} thread(s), mean over ranks",
                                     config.runtime.blas_threads);
  }
  const auto max_work = max_local_work(sampler, config.steps, world);
  const double state_bytes = 4.0 * 4.0 * model.parameter_count();  // params, grads, AdamW m and v
  result.memory_estimate_mib = (state_bytes + model.activation_bytes(max_work.first, max_work.second)) / 1048576.0;
  if (log) print_banner(*log, config, world, model, result, max_work);
  if (out) write_provenance(*out, config, world, result, model.parameter_count());

  for (int step = 0; step < config.steps; ++step) {
    const double t_start = now_seconds();
    const GlobalBatch batch = sampler.batch(step);
    const auto [first, last] = static_share(static_cast<int>(batch.samples.size()), world.rank, world.size);
    const std::vector<SampleMeta> mine(batch.samples.begin() + first, batch.samples.begin() + last);
    const PackedBatch packed = pack_samples(sampler, step, mine);
    // Per-token normalisation over the global batch: every rank knows the global target count.
    const float grad_scale = 1.0f / static_cast<float>(std::max<std::int64_t>(1, batch.loss_targets()));
    model.zero_grads();
    const double t_data = now_seconds();

    EncoderActivations enc_acts;
    model.encoder_forward(packed.encoder, enc_acts);
    const double t_enc_fwd = now_seconds();
    t_mat d_embeddings("d_image_embeddings", packed.encoder.patches, config.model.llm.width);
    double loss_sum = model.llm_forward_backward(packed.llm, enc_acts.embeddings, grad_scale, d_embeddings);
    const double t_llm = now_seconds();
    model.encoder_backward(packed.encoder, enc_acts, d_embeddings);
    const double t_enc_bwd = now_seconds();

    allreduce_sum(model.grads(), world.comm);
    MPI_Allreduce(MPI_IN_PLACE, &loss_sum, 1, MPI_DOUBLE, MPI_SUM, world.comm);
    const double t_sync = now_seconds();

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

    // Phase times: max over ranks (the slowest rank sets the pace); FLOPs: sum over ranks.
    double phases[6] = {t_end - t_start, t_data - t_start, (t_enc_fwd - t_data) + (t_enc_bwd - t_llm),
                        t_llm - t_enc_fwd, t_sync - t_enc_bwd, t_end - t_sync};
    MPI_Allreduce(MPI_IN_PLACE, phases, 6, MPI_DOUBLE, MPI_MAX, world.comm);
    double flops = model.step_flops(packed.encoder, packed.llm);
    MPI_Allreduce(MPI_IN_PLACE, &flops, 1, MPI_DOUBLE, MPI_SUM, world.comm);

    StepRecord s;
    s.step = step;
    s.loss = loss_sum / static_cast<double>(std::max<std::int64_t>(1, batch.loss_targets()));
    s.text_tokens = batch.text_tokens();
    s.image_tokens = batch.image_tokens();
    s.loss_targets = batch.loss_targets();
    s.samples = static_cast<int>(batch.samples.size());
    s.step_seconds = phases[0], s.data_seconds = phases[1], s.encoder_seconds = phases[2];
    s.llm_seconds = phases[3], s.grad_sync_seconds = phases[4], s.optimizer_seconds = phases[5];
    s.tokens_per_second = (s.text_tokens + s.image_tokens) / s.step_seconds;
    s.model_flops = flops;
    s.mfu = flops / s.step_seconds / (result.peak_gflops_per_rank * 1e9 * world.size);
    result.steps.push_back(s);
    if (out) out->append_step(s);
    if (log) print_step(*log, s, config.steps);
  }
  double rss = peak_resident_mib();
  MPI_Allreduce(MPI_IN_PLACE, &rss, 1, MPI_DOUBLE, MPI_MAX, world.comm);
  result.peak_resident_mib = rss;
  if (out) {
    out->set_run_attribute("peak_resident_mib", rss);
  }
  if (log) print_summary(*log, result, world, options.out_path);
  return result;
}

}  // namespace minimllm
