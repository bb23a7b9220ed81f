// The disaggregated pipeline's stages (internal, DistTrain; step_executor.cpp): which stage each sample
// runs in, the inter-micro-batch reordering, and the cheap step estimate that chooses the encoder rank
// and stage counts.
#pragma once

#include <vector>

#include "assignment.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/planning/cost_model.hpp"

namespace minimllm::planning {

// Disaggregated pipeline (DistTrain; step_executor.cpp): stage m is micro-batch m of every LLM group with
// the items of its samples. The stage of every sample, and the number of stages (the most micro-batches
// of any group).
std::vector<int> stage_of_samples(const std::vector<LlmGroup>& groups, int samples, int* stages = nullptr);

// Inter-micro-batch reordering (DistTrain) for the disaggregated pipeline (step_executor.cpp), where each
// LLM rank runs its micro-batches back to back as their encoder rows arrive and each encoder rank runs
// every forward, then each backward as its gradients come back.
// sort_by_encoder_share orders each group's samples by increasing encoder time per LLM time (text-only
// first; ties by decreasing LLM time, then index). reorder_into_stages, on groups so sorted, splits each
// group's samples into min(stages, samples) micro-batches (the executor's consecutive blocks of
// near-equal count): the last micro-batch, then the first, take the samples with the least encoder work
// per LLM time, so the pipeline starts without waiting for much encoding and ends without an encoder
// backward tail; the middle micro-batches share the rest by LPT on LLM time, so every group's stages
// progress together. Memory: more micro-batches where token_capacity(g) needs them; a group whose blocks
// still overflow falls back to fit_micro_batches. llm_time: each sample's time on its group.
// O(samples log stages + stages) per group (the LPT over a LoadTree of the middle blocks).
void sort_by_encoder_share(std::vector<LlmGroup>& groups, const std::vector<double>& llm_time,
                           const std::vector<double>& encoder_time);
void reorder_into_stages(std::vector<LlmGroup>& groups, int stages, const BatchCosts& costs,
                         const std::vector<double>& llm_time, const CostModel& cost);

// The disaggregated pipeline's step (predict()'s model) estimated cheaply, with every stage's encoder
// work spread evenly over `encoder_ranks` and no transfer time: used to choose the encoder rank count
// and the stage count before items are balanced. O(samples + groups x stages). forward_share: the
// forward's share of the encoder's time (CostModel::step.encoder_forward_share).
double pipeline_estimate(const std::vector<LlmGroup>& groups, const std::vector<double>& llm_time,
                         const std::vector<double>& encoder_time, int encoder_ranks, double forward_share);

}  // namespace minimllm::planning
