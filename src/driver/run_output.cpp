#include "minimllm/driver/run_output.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <stdexcept>

#include "minimllm/config/run_config.hpp"
#include "minimllm/driver/agreement.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/metrics/output_file.hpp"
#include "minimllm/planning/policy_registry.hpp"
#include "minimllm/step/gradient_sync.hpp"

namespace minimllm {

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec_a, ec_b;
  if (fs::exists(a, ec_a) && fs::exists(b, ec_b)) {
    std::error_code ec;
    const bool same = fs::equivalent(a, b, ec);
    if (!ec) return same;
  }
  std::error_code ec;
  const fs::path pa = fs::weakly_canonical(fs::absolute(a, ec), ec);
  if (ec) return fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal();
  const fs::path pb = fs::weakly_canonical(fs::absolute(b, ec), ec);
  if (ec) return fs::absolute(a).lexically_normal() == fs::absolute(b).lexically_normal();
  return pa == pb;
}

void check_output_path(const std::string& path, bool overwrite, const std::vector<RunInputFile>& inputs,
                       const std::string& flag) {
  const std::string what = flag == "--out" ? "output file" : "file";
  if (path.empty()) throw InputError(fmt::format("{} \"\": an empty path; name a file", flag));
  // The file and its lock `<path>.lock` (which a run creates and writes its pid into).
  for (const std::string& made : {path, FileLock::lock_path(path)}) {
    check_replaceable(made, flag);  // a link, device, FIFO or directory there: named, never followed
    const std::string made_what = made == path ? what : "lock file " + made + " of the " + what;
    for (const RunInputFile& input : inputs) {
      if (!input.path.empty() && same_file(made, input.path))
        throw InputError(fmt::format("{}: the {} would replace the {} {}; choose another {}", path, made_what,
                                     input.what, input.path, flag));
    }
  }
  std::error_code ec;
  if (!overwrite && std::filesystem::exists(path, ec))
    throw InputError(
        fmt::format("{}: {} exists; pass --overwrite to replace it or choose another {}", path, what, flag));
  FileLock::check_not_busy(path);
}

RunOutput::RunOutput(const std::string& path, bool overwrite, const World& world)
    : policies_(policy_names()),
      sources_(kPlanSources.begin(), kPlanSources.end()),
      solver_statuses_(kSolverStatuses.begin(), kSolverStatuses.end()) {
  std::exception_ptr error;
  if (world.is_root() && !path.empty()) {
    try {
      writer_ = std::make_unique<Hdf5RunWriter>(path, overwrite);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_on_error(world.comm, error);  // every rank throws rank 0's error
}

void RunOutput::write_run_attributes(const RunConfig& config, const TrainResult& r, double parameters,
                                     std::vector<RunAttribute> attributes,
                                     const std::string& calibration_text) {
  attributes.push_back({"gemm_backend", r.gemm_backend.empty()
                                            ? std::string(to_string(default_gemm_backend()))
                                            : r.gemm_backend});
  attributes.push_back({"gemm_choice", r.gemm_choice});
  attributes.push_back({"seed", static_cast<long long>(config.seed)});
  attributes.push_back({"steps", static_cast<long long>(config.steps)});
  attributes.push_back({"global_batch", static_cast<long long>(config.data.global_batch)});
  attributes.push_back({"placement", config.parallel.placement});
  attributes.push_back({"policy", config.parallel.policy});
  attributes.push_back({"cp", static_cast<long long>(config.parallel.cp)});
  attributes.push_back({"cp_comm", config.parallel.cp_comm});
  attributes.push_back({"comm_precreate", config.parallel.comm_precreate});
  attributes.push_back({"tokens_per_rank", static_cast<long long>(config.parallel.tokens_per_rank)});
  attributes.push_back({"parameters", static_cast<long long>(parameters)});
  attributes.push_back({"peak_gflops_per_rank", r.peak_gflops_per_rank});
  attributes.push_back({"peak_source", r.peak_source});
  attributes.push_back({"attainable_gflops_per_rank", r.attainable_gflops_per_rank});
  attributes.push_back({"attainable_source", r.attainable_source});
  attributes.push_back({"planning_gflops_per_rank", r.planning_gflops_per_rank});
  attributes.push_back({"memory_estimate_mib", r.memory_estimate_mib});
  attributes.push_back({"precision", r.precision});
  attributes.push_back({"recompute", r.recompute});
  attributes.push_back({"collectives", r.collectives});
  attributes.push_back({"collectives_reason", r.collectives_reason});
  // What ran: the distributed optimizer's reduce-scatter is never overlapped.
  attributes.push_back({"overlap_grad_sync", static_cast<long long>(grad_sync_options(config).overlapped())});
  attributes.push_back(
      {"distributed_optimizer", static_cast<long long>(config.parallel.distributed_optimizer)});
  attributes.push_back({"grad_bucket_mb", config.runtime.grad_bucket_mb});
  attributes.push_back({"cost_model_source", r.cost_model_source});
  if (!calibration_text.empty()) attributes.push_back({"calibration", calibration_text});
  for (RunAttribute& a : r.machine.attributes()) attributes.push_back(std::move(a));
  try {
    writer_->set_run_attributes(attributes);  // flushed and fsynced
    writer_->check_free_space();              // a disk too full for the first step fails set-up, agreed
  } catch (...) {
    writer_->discard();  // still set-up (e.g. a full disk): no half-made file is left
    writer_.reset();
    throw;
  }
}

void RunOutput::describe_step_tables() {
  for (const std::string& name : rank_table_names())
    writer_->set_table_attribute("/ranks/" + name, "units", rank_table_unit(name));
  const std::pair<const char*, const char*> plan_units[] = {
      {"/plans/llm_group_of_rank", "group (-1: no LLM work)"},
      {"/plans/llm_group_size", "rank"},
      {"/plans/llm_group_samples", "sample"},
      {"/plans/encoder_images_of_rank", "image"},
      {"/plans/policy", "enum"},
      {"/plans/planner_source", "enum"},
      {"/plans/solver_status", "enum"},
      {"/plans/solver_gap", "1 (-1: none)"},
      {"/plans/solver_seconds", "s"}};
  for (const auto& [table, unit] : plan_units) writer_->set_table_attribute(table, "units", unit);
  tables_described_ = true;
}

// /ranks/<table> [steps, ranks], so imbalance and idle time can be seen. /plans: the step's plan,
// identical on every rank, so rank 0 writes it without messages. Groups are numbered in plan order:
// llm_group_of_rank [steps, ranks] (-1: no LLM work), llm_group_size and llm_group_samples [steps, ranks]
// (column g: group g; 0 past the last group), encoder_images_of_rank [steps, ranks], and policy,
// planner_source and solver_status [steps] (enumerated: a value outside its members is a logic error),
// solver_gap, solver_seconds [steps] (StepPlan::origin). /predicted: the prediction's terms beside the
// measured phases.
void RunOutput::append_step_tables(const StepMetrics& metrics, const PlannedStep& planned, int world_size) {
  writer_->check_free_space();
  const std::vector<std::string>& tables = rank_table_names();
  for (size_t t = 0; t < tables.size(); ++t)
    writer_->append_row("/ranks/" + tables[t], metrics.rank_tables[t]);

  const StepPlan& plan = planned.plan;
  std::vector<int> group_of_rank(world_size, -1), group_size(world_size, 0), group_samples(world_size, 0),
      images_of_rank(world_size, 0);
  for (size_t g = 0; g < plan.llm_groups.size(); ++g) {
    for (int r : plan.llm_groups[g].ranks) group_of_rank[r] = static_cast<int>(g);
    group_size[g] = static_cast<int>(plan.llm_groups[g].ranks.size());
    group_samples[g] = static_cast<int>(plan.llm_groups[g].samples.size());
  }
  for (int owner : plan.item_owner) ++images_of_rank[owner];
  writer_->append_row("/plans/llm_group_of_rank", group_of_rank);
  writer_->append_row("/plans/llm_group_size", group_size);
  writer_->append_row("/plans/llm_group_samples", group_samples);
  writer_->append_row("/plans/encoder_images_of_rank", images_of_rank);
  writer_->append_enum("/plans/policy", policies_, plan.policy);
  writer_->append_enum("/plans/planner_source", sources_, plan.origin.source);
  writer_->append_enum("/plans/solver_status", solver_statuses_, plan.origin.solver_status);
  writer_->append_value("/plans/solver_gap", plan.origin.solver_gap);
  writer_->append_value("/plans/solver_seconds", plan.origin.solver_seconds);

  if (!tables_described_) describe_step_tables();
  const PlanPrediction& p = planned.forecast.prediction;
  static const std::vector<Column> predicted_columns = {
      {"step_s", "s"}, {"data_s", "s"},      {"encoder_s", "s"},  {"boundary_s", "s"},
      {"llm_s", "s"},  {"grad_sync_s", "s"}, {"optimizer_s", "s"}};
  writer_->append_record("/predicted", predicted_columns,
                         {p.makespan, p.data, p.encoder, p.boundary, p.llm, p.grad_sync, p.optimizer});
}

}  // namespace minimllm
