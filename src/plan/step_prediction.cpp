#include "minimllm/plan/step_prediction.hpp"

#include <algorithm>

namespace minimllm {

PlanPrediction predict_step(const StepPlan& plan, const GlobalBatch& batch, const CostModel& cost,
                            int world_size) {
  PlanPrediction p = predict(plan, batch, cost, world_size);
  const StepCost& step = cost.step;

  // Inputs each rank packs: the images it encodes (their patches) and its share of its group's rows.
  std::vector<double> images(world_size, 0.0), patches(world_size, 0.0), rows(world_size, 0.0);
  double total_images = 0.0, total_patches = 0.0, total_rows = 0.0;
  int image = 0;
  for (const SampleMeta& sample : batch.samples)
    for (const ImageMeta& im : sample.images) {
      const int owner = plan.image_owner[image++];
      images[owner] += 1.0, patches[owner] += im.patches;
    }
  for (const LlmGroup& group : plan.llm_groups) {
    double tokens = 0.0;
    for (int s : group.samples) tokens += batch.samples[s].tokens();
    for (int r : group.ranks) rows[r] += tokens / group.ranks.size();
  }
  double data_max = 0.0, data_sum = 0.0;
  for (int r = 0; r < world_size; ++r) {
    const double d = step.data_c + step.data_per_image * images[r] + step.data_per_patch * patches[r] +
                     step.data_per_token * rows[r];
    data_max = std::max(data_max, d), data_sum += d;
    total_images += images[r], total_patches += patches[r], total_rows += rows[r];
  }
  p.data = data_max;
  p.grad_sync = step.grad_sync(world_size, cost.ranks_per_node);
  p.optimizer = step.optimizer;

  const double phases = p.makespan;
  const double fixed = p.grad_sync + p.optimizer;
  p.makespan = phases + p.data + fixed;
  p.lower_bound += fixed + step.data_c +
                   (step.data_per_image * total_images + step.data_per_patch * total_patches +
                    step.data_per_token * total_rows) /
                       world_size;
  if (p.makespan > 0.0) {
    p.idle_fraction = (p.idle_fraction * phases + (data_max - data_sum / world_size)) / p.makespan;
    p.comm_fraction = (p.comm_fraction * phases + p.grad_sync) / p.makespan;
  }
  return p;
}

}  // namespace minimllm
