#include "minimllm/driver/run_output.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

#include "minimllm/config/run_config.hpp"
#include "minimllm/kernels/gemm.hpp"

namespace minimllm {

RunOutput::RunOutput(const std::string& path, bool overwrite, const World& world)
    : policy_names_(policy_names()) {
  std::string error;
  int kind = 0;  // 0 ok, 1 input error, 2 runtime error
  if (world.is_root() && !path.empty()) {
    try {
      writer_ = std::make_unique<Hdf5RunWriter>(path, overwrite);
    } catch (const InputError& e) {
      kind = 1, error = e.what();
    } catch (const std::exception& e) {
      kind = 2, error = e.what();
    }
  }
  MPI_Bcast(&kind, 1, MPI_INT, 0, world.comm);
  if (kind == 0) return;
  int length = static_cast<int>(error.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, world.comm);
  error.resize(length);
  MPI_Bcast(error.data(), length, MPI_CHAR, 0, world.comm);
  if (kind == 1) throw InputError(error);
  throw std::runtime_error(error);
}

void RunOutput::write_run_attributes(const RunConfig& config, const TrainResult& r, double parameters,
                                     std::vector<RunAttribute> attributes,
                                     const std::string& calibration_text) {
  attributes.push_back({"gemm_backend", std::string(to_string(default_gemm_backend()))});
  attributes.push_back({"placement", config.parallel.placement});
  attributes.push_back({"policy", config.parallel.policy});
  attributes.push_back({"parameters", static_cast<long long>(parameters)});
  attributes.push_back({"peak_gflops_per_rank", r.peak_gflops_per_rank});
  attributes.push_back({"peak_source", r.peak_source});
  attributes.push_back({"memory_estimate_mib", r.memory_estimate_mib});
  attributes.push_back({"precision", r.precision});
  attributes.push_back({"collectives", r.collectives});
  attributes.push_back({"collectives_reason", r.collectives_reason});
  writer_->set_run_attributes(attributes);
  writer_->set_run_attribute("cost_model_source", r.cost_model_source);
  writer_->set_run_attribute("predicted_columns",
                             "step_s, data_s, encoder_s, boundary_s, llm_s, grad_sync_s, optimizer_s");
  if (!calibration_text.empty()) writer_->set_run_attribute("calibration", calibration_text);
}

// /ranks/<table> [steps, ranks], so imbalance and idle time can be seen. /plans: the step's plan,
// identical on every rank, so rank 0 writes it without messages. Groups are numbered in plan order:
// llm_group_of_rank [steps, ranks] (-1: no LLM work), llm_group_size and llm_group_samples [steps, ranks]
// (column g: group g; 0 past the last group), encoder_images_of_rank [steps, ranks], and policy [steps],
// a code into the attribute `names`. /predicted: the prediction's terms beside the measured phases.
void RunOutput::append_step_tables(const StepMetrics& metrics, const PlannedStep& planned, int world_size) {
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
  for (int owner : plan.image_owner) ++images_of_rank[owner];
  writer_->append_row("/plans/llm_group_of_rank", group_of_rank);
  writer_->append_row("/plans/llm_group_size", group_size);
  writer_->append_row("/plans/llm_group_samples", group_samples);
  writer_->append_row("/plans/encoder_images_of_rank", images_of_rank);
  auto code = std::find(policy_names_.begin(), policy_names_.end(), plan.policy);
  if (code == policy_names_.end()) code = policy_names_.insert(policy_names_.end(), plan.policy);
  writer_->append_value("/plans/policy", static_cast<int>(code - policy_names_.begin()));
  if (policies_named_ != policy_names_.size()) {
    writer_->set_table_attribute("/plans/policy", "names", fmt::format("{}", fmt::join(policy_names_, ", ")));
    policies_named_ = policy_names_.size();
  }

  const PlanPrediction& p = planned.prediction;
  writer_->append_row("/predicted", std::vector<double>{p.makespan, p.data, p.encoder, p.boundary, p.llm,
                                                        p.grad_sync, p.optimizer});
}

}  // namespace minimllm
