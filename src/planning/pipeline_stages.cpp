#include "pipeline_stages.hpp"

#include <algorithm>

#include "load_tree.hpp"
#include "micro_batches.hpp"
#include "minimllm/layout/rank_work.hpp"

namespace minimllm::planning {

std::vector<int> stage_of_samples(const std::vector<LlmGroup>& groups, int samples, int* stages) {
  std::vector<int> stage(samples, 0);
  int most = 1;
  for (const LlmGroup& group : groups) most = std::max(most, group.micro_batches);
  for (const LlmGroup& group : groups) {
    const int parts = group.micro_batches;
    for (int m = 0; m < parts; ++m)
      for (int i = micro_batch_begin(group, m); i < micro_batch_begin(group, m + 1); ++i)
        stage[group.samples[i]] = pipeline_stage(m, parts, most);
  }
  if (stages) *stages = most;
  return stage;
}

void sort_by_encoder_share(std::vector<LlmGroup>& groups, const std::vector<double>& llm_time,
                           const std::vector<double>& encoder_time) {
  for (LlmGroup& group : groups)
    std::sort(group.samples.begin(), group.samples.end(), [&](int a, int b) {
      const double ra = encoder_time[a] * llm_time[b], rb = encoder_time[b] * llm_time[a];
      return ra != rb ? ra < rb : llm_time[a] != llm_time[b] ? llm_time[a] > llm_time[b] : a < b;
    });
}

void reorder_into_stages(std::vector<LlmGroup>& groups, int stages, const BatchCosts& costs,
                         const std::vector<double>& llm_time, const CostModel& cost) {
  std::vector<int> room, order;
  for (LlmGroup& group : groups) {
    const int n = static_cast<int>(group.samples.size());
    int parts = std::max(1, std::min(stages, n));
    group.micro_batch_ends.clear();  // near-equal blocks below
    if (cost.capacity_bytes > 0.0) {
      LlmGroup fitted = group;  // the fewest micro-batches memory allows
      fit_micro_batches(fitted, costs, cost);
      parts = std::max(parts, fitted.micro_batches);
    }
    group.micro_batches = parts;
    if (parts == 1) continue;
    // Block m holds positions [micro_batch_begin(m), micro_batch_begin(m + 1)) of the group's list.
    room.assign(parts, 0);
    for (int m = 0; m < parts; ++m)
      room[m] = micro_batch_begin(n, m + 1, parts) - micro_batch_begin(n, m, parts);
    order.assign(n, -1);
    // The last block, then the first, take the samples with the least encoder work per LLM time.
    int next = 0;
    for (int m : {parts - 1, 0})
      for (int i = micro_batch_begin(n, m, parts); i < micro_batch_begin(n, m + 1, parts); ++i)
        order[i] = group.samples[next++];
    // The middle blocks: the rest by LPT on LLM time (longest first onto the least-loaded block with room).
    std::vector<int> rest(group.samples.begin() + next, group.samples.end());
    std::stable_sort(rest.begin(), rest.end(), [&](int a, int b) { return llm_time[a] > llm_time[b]; });
    LoadTree middle(std::max(0, parts - 2));  // block m is slot m - 1; a full block carries kInf
    for (int m = 1; m + 1 < parts; ++m)
      if (room[m] == 0) middle.set(m - 1, kInf);
    for (int s : rest) {
      const int best = middle.argmin() + 1;
      order[micro_batch_begin(n, best + 1, parts) - room[best]--] = s;
      middle.set(best - 1, room[best] > 0 ? middle.load(best - 1) + llm_time[s] : kInf);
    }
    group.samples = order;
    if (cost.capacity_bytes > 0.0) {
      for (int m = 0; m < parts; ++m) {
        double tokens = 0.0;
        const int begin = micro_batch_begin(n, m, parts), end = micro_batch_begin(n, m + 1, parts);
        for (int i = begin; i < end; ++i) tokens += costs.tokens[group.samples[i]];
        if (tokens > cost.token_capacity(static_cast<int>(group.ranks.size())) && end - begin > 1) {
          fit_micro_batches(group, costs, cost);
          break;
        }
      }
    }
  }
}

double pipeline_estimate(const std::vector<LlmGroup>& groups, const std::vector<double>& llm_time,
                         const std::vector<double>& encoder_time, int encoder_ranks, double forward_share) {
  int stages = 1;
  for (const LlmGroup& group : groups) stages = std::max(stages, group.micro_batches);
  const size_t n_groups = groups.size();
  // Per stage: encoder work of an encoder rank (spread evenly); per group and stage: LLM and encoder work.
  std::vector<double> stage_encoder(stages, 0.0), group_llm(n_groups * stages, 0.0),
      group_encoder(n_groups * stages, 0.0);
  const double per_rank = 1.0 / encoder_ranks;
  for (size_t k = 0; k < n_groups; ++k) {
    const LlmGroup& group = groups[k];
    const int parts = group.micro_batches;
    for (int m = 0; m < parts; ++m) {
      const int stage = pipeline_stage(m, parts, stages);
      for (int i = micro_batch_begin(group, m); i < micro_batch_begin(group, m + 1); ++i) {
        const int s = group.samples[i];
        stage_encoder[stage] += encoder_time[s] * per_rank;
        group_encoder[k * stages + stage] += encoder_time[s];
        group_llm[k * stages + stage] += llm_time[s];
      }
    }
  }
  std::vector<double> ready(stages), group_end(n_groups, 0.0);
  double forward = 0.0;
  for (int position = 0; position < stages; ++position) {
    const int m = forward_stage(position, stages);
    ready[m] = forward += forward_share * stage_encoder[m];
  }
  double encoder_end = forward, llm_end = 0.0;
  for (int m = 0; m < stages; ++m) {
    double stage_end = 0.0;  // the last group with items in this stage
    for (size_t k = 0; k < n_groups; ++k) {
      const bool items = group_encoder[k * stages + m] > 0.0;
      group_end[k] = (items ? std::max(group_end[k], ready[m]) : group_end[k]) + group_llm[k * stages + m];
      llm_end = std::max(llm_end, group_end[k]);
      if (items) stage_end = std::max(stage_end, group_end[k]);
    }
    encoder_end = std::max(encoder_end, stage_end) + (1.0 - forward_share) * stage_encoder[m];
  }
  return std::max(llm_end, encoder_end);
}

}  // namespace minimllm::planning
