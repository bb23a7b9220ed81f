// Building blocks shared by the planners (internal): a load tree for least-loaded queries, LPT
// assignment of samples to groups and of images to encoder ranks, placement of groups on nodes,
// micro-batches that respect memory, and the search for a group layout that meets a target step time.
#pragma once

#include <utility>
#include <vector>

#include "minimllm/plan/cost_model.hpp"
#include "minimllm/plan/planner.hpp"
#include "minimllm/plan/step_plan.hpp"

namespace minimllm::planning {

// Least-loaded slot queries over a fixed set of slots: a tournament tree whose nodes hold the least load
// below them and its slot (ties go to the lowest slot, which keeps every planner deterministic). O(log n)
// per update and range query. Loads only grow.
class LoadTree {
 public:
  explicit LoadTree(int slots);
  double load(int slot) const { return load_[leaves_ + slot]; }
  int argmin() const { return slot_[1]; }
  double min_load() const { return load_[1]; }
  int argmin(int first, int last) const;  // least-loaded slot in [first, last); requires first < last
  void add(int slot, double amount);

 private:
  void pull(int node);  // node = the lesser of its children
  int leaves_;
  std::vector<double> load_;
  std::vector<int> slot_;
};

// Indices 0..n-1 sorted by decreasing key, ties by increasing index (a counting sort when the keys are
// small non-negative integers, as tokens and patches are).
std::vector<int> order_by_decreasing(const std::vector<int>& key);

// One LLM group as a range of consecutive ranks.
struct RankRange {
  int first = 0, size = 1;
};

// Per-sample quantities every planner needs, computed once per batch.
struct BatchCosts {
  std::vector<double> tokens;  // fused LLM sequence length
  int max_tokens = 0;
  std::vector<double> llm;  // LLM compute on one rank (the key planners sort by)
  std::vector<int> by_llm;  // samples by decreasing LLM cost (= decreasing tokens)
  double total_llm = 0.0;
};
BatchCosts batch_costs(const GlobalBatch& batch, const CostModel& cost);

// Earliest-finish-time list scheduling (LPT generalised to groups of different sizes): samples in the
// given order (largest first) each go to the group where they would finish first among the groups that
// can hold them (memory; if none can, the one that holds the most). Groups of equal size and node span
// are interchangeable, so each such class keeps a LoadTree and only its least-loaded member is a
// candidate: O(samples x classes x log groups). `samples` and `loads` (per group, predicted LLM time)
// come in with whatever is already pinned and go out with the new samples appended. Returns how many
// samples went to a group too small to hold them.
int assign_samples(const BatchCosts& costs, const std::vector<int>& order,
                   const std::vector<RankRange>& groups, const CostModel& cost,
                   std::vector<std::vector<int>>& samples, std::vector<double>& loads);

// Local search after assign_samples: while a movable sample (movable[sample] != 0) of the slowest group
// can move to the least-loaded group of some class (that can hold it), or swap with a shorter movable
// sample of that group, so that both finish before the current slowest, the best such step is taken. At
// most max_moves steps, each O(samples of the two groups x classes + log groups). Returns the steps.
int refine_assignment(const BatchCosts& costs, const std::vector<RankRange>& groups, const CostModel& cost,
                      const std::vector<char>& movable, std::vector<std::vector<int>>& samples,
                      std::vector<double>& loads, int max_moves);

// Places groups of the given sizes on consecutive ranks in [first_rank, first_rank + ranks): groups larger
// than a node first, from first_rank; the others best-fit-decreasing into the nodes' free space (so a
// group that fits in a node does not span two unless the space is too fragmented); groups of one rank
// fill the rest. Returns the ranges of `sizes` in their given order, then the singletons.
std::vector<RankRange> place_groups(std::vector<int> sizes, int first_rank, int ranks, int ranks_per_node);

// Images to encoder ranks by LPT on encoder time (largest first onto the least-loaded rank). When the
// least-loaded encoder rank on the node of the sample's LLM group (preferred_rank[sample], -1: none) is
// within `tolerance` x mean load of the best rank overall, it wins: rows then stay inside the node.
// With stage_of_sample (disaggregated pipeline), the images of each stage are balanced on their own, as
// each stage is encoded in its own pipeline tick.
std::vector<int> balance_images(const GlobalBatch& batch, const CostModel& cost,
                                const std::vector<int>& encoder_ranks, const std::vector<int>& preferred_rank,
                                double tolerance, const std::vector<int>& stage_of_sample = {});

// Encoder time of every sample (the sum over its images).
std::vector<double> sample_encoder_times(const GlobalBatch& batch, const CostModel& cost);

// Disaggregated pipeline (DistTrain; step_executor.cpp): stage m is micro-batch m of every LLM group with
// the images of its samples. The stage of every sample, and the number of stages (the most micro-batches
// of any group).
std::vector<int> stage_of_samples(const std::vector<LlmGroup>& groups, int samples, int* stages = nullptr);

// Inter-micro-batch reordering (DistTrain) for the disaggregated pipeline (step_executor.cpp), where each
// LLM rank runs its micro-batches back to back as their image rows arrive and each encoder rank runs
// every forward, then each backward as its gradients come back.
// sort_by_encoder_share orders each group's samples by increasing encoder time per LLM time (text-only
// first; ties by decreasing LLM time, then index). reorder_into_stages, on groups so sorted, splits each
// group's samples into min(stages, samples) micro-batches (the executor's consecutive blocks of
// near-equal count): the last micro-batch, then the first, take the samples with the least encoder work
// per LLM time, so the pipeline starts without waiting for much encoding and ends without an encoder
// backward tail; the middle micro-batches share the rest by LPT on LLM time, so every group's stages
// progress together. Memory: more micro-batches where token_capacity(g) needs them; a group whose blocks
// still overflow falls back to fit_micro_batches. llm_time: each sample's time on its group.
// O(samples x stages).
void sort_by_encoder_share(std::vector<LlmGroup>& groups, const std::vector<double>& llm_time,
                           const std::vector<double>& encoder_time);
void reorder_into_stages(std::vector<LlmGroup>& groups, int stages, const BatchCosts& costs,
                         const std::vector<double>& llm_time, const CostModel& cost);

// The disaggregated pipeline's step (predict()'s model) estimated cheaply, with every stage's encoder
// work spread evenly over `encoder_ranks` and no transfer time: used to choose the encoder rank count
// and the stage count before images are balanced. O(samples + groups x stages).
double pipeline_estimate(const std::vector<LlmGroup>& groups, const std::vector<double>& llm_time,
                         const std::vector<double>& encoder_time, int encoder_ranks);

// `count` encoder ranks spread over the nodes as evenly as possible (the first ranks of each node, nodes
// taken in turn), so that images can be encoded on the node of their LLM rank. Sorted.
std::vector<int> spread_over_nodes(int count, int world_size, int ranks_per_node);

// Orders a group's samples and sets its micro-batch count (the executor splits a group's samples into
// consecutive blocks of near-equal count) to the fewest micro-batches whose token sums all fit
// token_capacity(g). A sample larger than the capacity ends up alone in its micro-batch (best effort).
void fit_micro_batches(LlmGroup& group, const BatchCosts& costs, const CostModel& cost);

// A colocated or disaggregated plan from LLM groups (rank ranges and their samples): micro-batches fitted
// to memory, images balanced over encoder_ranks with each sample's group as the preferred node.
StepPlan assemble_plan(const std::string& policy, Placement placement, const std::vector<RankRange>& groups,
                       std::vector<std::vector<int>> samples, std::vector<int> encoder_ranks,
                       const GlobalBatch& batch, const BatchCosts& costs, const CostModel& cost,
                       double locality_tolerance);

// Target-driven layouts (DHP, FlexSP). For a target LLM time T, the long samples (the prefix of
// costs.by_llm that cannot meet T on one rank, by time or memory) are cut into runs of consecutive
// samples, one group per run, by a dynamic programme:
//   f[i] = min over run lengths l of f[i - l] + (fewest ranks on which run i-l..i-1 meets T)
// where the ranks are any integer (SizeRule::any) or a power of two (SizeRule::power_of_two), at least
// what the run's largest sample needs for memory, found in O(1) (the time is a/g + b in g). Run lengths
// are 1..8, then 1.5x apart, plus the whole prefix, so long runs (many samples forced into one big group
// by memory) stay reachable at O(log n) candidates per sample. The short samples fill the groups' spare
// time g (T - time), then need ceil(rest / T) ranks of their own.
// For each rule, the search bisects T for the smallest target whose demand fits the ranks, then tries
// that target and looser ones (x1.05 .. x1.4) while the best layout so far is slower than the target
// tried, and the all-singleton layout when that could win. Each layout gets its long runs pinned to
// their groups and the short samples by assign_samples; the smallest LLM makespan wins among the
// layouts that respect memory. O(n log n) per target (~20 per rule), plus one assignment per layout.
// The winner's short samples are then refined (refine_assignment, at most one move per group).
enum class SizeRule { any, power_of_two };
struct LayoutChoice {
  std::vector<RankRange> groups;
  std::vector<std::vector<int>> samples;
  double llm_makespan = 0.0;
  int overflowing = 0;       // samples on groups whose memory cannot hold them (0 when some layout can)
  double target = 0.0;       // the target that produced it (0: the all-singleton layout)
  std::vector<char> pinned;  // per sample: one of the long runs, on its group by construction
};
LayoutChoice best_target_layout(const std::vector<SizeRule>& rules, int ranks, const BatchCosts& costs,
                                const CostModel& cost);

// Lower bound of the LLM phase on `ranks` ranks: max(total one-rank compute / ranks, the largest
// sample's best time on any group of at most `ranks` ranks; memory ignored, so it bounds every plan).
double llm_lower_bound(double total_llm, double largest_tokens, const CostModel& cost, int ranks);

}  // namespace minimllm::planning
