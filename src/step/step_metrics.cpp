#include "minimllm/step/step_metrics.hpp"

#include <algorithm>
#include <cstdint>

namespace minimllm {
namespace {

std::vector<double> rank_table_values(const RankStepValues& v) {
  std::vector<double> values = {v.step_seconds};
  values.insert(values.end(), v.seconds.seconds.begin(), v.seconds.seconds.end());
  values.insert(values.end(), {v.model_flops, v.llm_rows, v.encoder_rows});
  return values;
}

// Every rank's values, gathered to rank 0 as [table][rank] (empty elsewhere).
std::vector<std::vector<double>> gather_rank_tables(MPI_Comm world, const RankStepValues& mine) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank), MPI_Comm_size(world, &size);
  const std::vector<double> values = rank_table_values(mine);
  const int n = static_cast<int>(values.size());
  std::vector<double> all(rank == 0 ? n * size : 0);
  MPI_Gather(values.data(), n, MPI_DOUBLE, all.data(), n, MPI_DOUBLE, 0, world);
  std::vector<std::vector<double>> tables;
  if (rank != 0) return tables;
  tables.assign(n, std::vector<double>(size));
  for (int r = 0; r < size; ++r)
    for (int t = 0; t < n; ++t) tables[t][r] = all[r * n + t];
  return tables;
}

}  // namespace

const std::vector<std::string>& rank_table_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {"step_seconds"};
    for (Phase phase : kPhases) n.push_back(seconds_column(phase));
    n.insert(n.end(), {"model_flops", "llm_rows", "encoder_rows"});
    return n;
  }();
  return names;
}

const char* rank_table_unit(const std::string& name) {
  if (name == "model_flops") return "FLOP";
  if (name == "llm_rows" || name == "encoder_rows") return "row";
  return "s";  // step_seconds and every phase's <phase>_seconds
}

CommPoolStats pool_activity(const CommPoolStats& now, const CommPoolStats& before) {
  CommPoolStats d;
  d.hits = now.hits - before.hits, d.misses = now.misses - before.misses;
  d.creations = now.creations - before.creations, d.evictions = now.evictions - before.evictions;
  d.creation_seconds = now.creation_seconds - before.creation_seconds;
  d.live = now.live;
  return d;
}

StepMetrics reduce_step_metrics(MPI_Comm world, const PlannedStep& planned, const StepOutcome& outcome,
                                double step_seconds, const CommPoolStats& pool, double peak_gflops_per_rank,
                                int ranks_per_unit) {
  StepMetrics m;
  // Per-rank values go to rank 0 first: this collective, not the timed output after it, absorbs any
  // wait for a rank that is late (e.g. descheduled on a shared node).
  m.rank_tables = gather_rank_tables(
      world, {step_seconds, outcome.seconds, outcome.flops, static_cast<double>(outcome.llm_rows),
              static_cast<double>(outcome.encoder_rows)});

  // Times: max over ranks (the slowest rank sets the pace); counts and FLOPs: sums over ranks.
  StepRecord& s = m.record;
  s.step_seconds = step_seconds;
  s.phase_seconds = outcome.seconds;
  s.comm_creation_seconds = pool.creation_seconds;
  s.planning_work_seconds = planned.planning_seconds;
  s.movement_seconds = outcome.movement_seconds;
  s.pipeline_bubble = outcome.pipeline_bubble;
  s.ideal_bubble = outcome.ideal_bubble;
  std::vector<double*> maxima = {&s.step_seconds,     &s.comm_creation_seconds, &s.planning_work_seconds,
                                 &s.movement_seconds, &s.pipeline_bubble,       &s.ideal_bubble};
  for (double& t : s.phase_seconds.seconds) maxima.push_back(&t);
  std::vector<double> values;
  for (double* x : maxima) values.push_back(*x);
  MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_MAX, world);
  for (size_t i = 0; i < maxima.size(); ++i) *maxima[i] = values[i];
  double sums[6] = {outcome.flops,
                    static_cast<double>(outcome.boundary_bytes),
                    static_cast<double>(pool.hits),
                    static_cast<double>(pool.creations),
                    static_cast<double>(pool.evictions),
                    static_cast<double>(outcome.movement_bytes)};
  MPI_Allreduce(MPI_IN_PLACE, sums, 6, MPI_DOUBLE, MPI_SUM, world);
  s.model_flops = sums[0] * ranks_per_unit;
  s.boundary_bytes = static_cast<std::int64_t>(sums[1]);
  s.comm_hits = static_cast<std::int64_t>(sums[2]);
  s.comm_creations = static_cast<std::int64_t>(sums[3]);
  s.comm_evictions = static_cast<std::int64_t>(sums[4]);
  s.movement_bytes = static_cast<std::int64_t>(sums[5]);

  const GlobalBatch& batch = planned.batch;
  int ranks = 1;
  MPI_Comm_size(world, &ranks);
  s.step = planned.step;
  s.loss = outcome.loss_sum / static_cast<double>(std::max<std::int64_t>(1, batch.loss_targets()));
  s.grad_norm = outcome.grad_norm;
  s.text_tokens = batch.text_tokens();
  s.image_tokens = batch.encoder_rows();
  s.loss_targets = batch.loss_targets();
  s.samples = static_cast<int>(batch.samples.size());
  s.tokens_per_second = (s.text_tokens + s.image_tokens) / s.step_seconds;
  s.mfu = s.model_flops / s.step_seconds / (peak_gflops_per_rank * 1e9 * ranks * ranks_per_unit);
  s.predicted_seconds = planned.forecast.prediction.makespan;
  s.lower_bound_seconds = planned.forecast.prediction.lower_bound;
  s.intra_node_bytes = static_cast<std::int64_t>(planned.forecast.traffic.intra_node_bytes);
  s.inter_node_bytes = static_cast<std::int64_t>(planned.forecast.traffic.inter_node_bytes);
  s.llm_groups = static_cast<int>(planned.plan.llm_groups.size());
  for (const LlmGroup& g : planned.plan.llm_groups)
    s.max_group_size = std::max<int>(s.max_group_size, g.ranks.size());
  return m;
}

}  // namespace minimllm
