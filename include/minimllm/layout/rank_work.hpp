// RankWork: what a StepPlan asks of one rank — which items it encodes, which chunk of which sample's
// fused sequence it holds in each LLM micro-batch (context parallelism), and the row routes that join
// the two layouts. Derived from (plan, batch) alone, so every rank can derive any rank's work.
#pragma once

#include <vector>

#include "minimllm/layout/row_route.hpp"
#include "minimllm/layout/step_plan.hpp"

namespace minimllm {

struct RowRange {
  int begin = 0, end = 0;
};

// Context parallelism's causal load balance, as TransformerEngine cuts sequences for Megatron-LM: a
// sequence of `tokens` rows in 2 x ranks near-equal chunks (floor(tokens k / 2 ranks) bounds), member p
// holding chunks p and 2 ranks - 1 - p, so that every member, and every step of a ring, has about the
// same causal attention work (an early chunk's queries see few keys, its partner's many). One rank: the
// whole sequence. Chunks may be empty when tokens < 2 x ranks.
std::vector<RowRange> load_balanced_chunks(int tokens, int ranks, int member);

// First sample (0-based, within a group's list of n) of micro-batch m of `parts`: consecutive, as even
// as possible blocks [begin(m), begin(m+1)).
inline int micro_batch_begin(int n, int m, int parts) {
  return static_cast<int>(static_cast<long long>(n) * m / parts);
}
// First sample (position in group.samples) of micro-batch m of a group (m = micro_batches: the end):
// its packed bins' ends, or near-equal blocks.
inline int micro_batch_begin(const LlmGroup& group, int m) {
  if (group.micro_batch_ends.empty())
    return micro_batch_begin(static_cast<int>(group.samples.size()), m, group.micro_batches);
  return m == 0 ? 0 : group.micro_batch_ends[m - 1];
}

// Disaggregated plans, and colocated ones whose encoder runs per micro-batch (EncoderSchedule), run in
// `stages` = the most micro-batches of any LLM group (step_executor.cpp). Micro-batch m of a group of `parts`
// is stage m, except its last, which is always the last stage: the stage whose gradients come back last (a
// group's last micro-batch ends with the group's work), so encoder ranks run it backward last.
inline int pipeline_stage(int m, int parts, int stages) { return m + 1 == parts ? stages - 1 : m; }
// The stage count of a staged plan (the most micro-batches of any group) and the stage of every item (its
// sample's micro-batch's, pipeline_stage), items numbered in sample order (first_item: the batch's
// first_item_of_samples).
int stage_count(const StepPlan& plan);
std::vector<int> item_stages(const StepPlan& plan, const std::vector<int>& first_item);
// Encoder ranks run the forward of the last stage first (groups of one micro-batch start at once), then
// stages 0, 1, ..., stages - 2; the backward in stage order.
inline int forward_stage(int position, int stages) { return position == 0 ? stages - 1 : position - 1; }

struct SequenceChunk {
  int sample = 0;          // index into the global batch
  int begin = 0, end = 0;  // rows of the sample's fused sequence held here
};

struct MicroBatchWork {
  std::vector<int> samples;  // in order
  // This rank's chunks of each sample (two under context parallelism, load_balanced_chunks), sample by
  // sample, each sample's in row order; any may be empty.
  std::vector<SequenceChunk> chunks;
  std::vector<int> sample_offsets;  // first row of each sample in the gathered keys (size samples+1)
  // Context parallelism: member_rows[r] = local rows of group member r; member_chunks[p]: group member p's
  // chunks, as `chunks` is this rank's (its rows in that order), which the ring attention's per-member key
  // segments and key_order follow.
  std::vector<int> member_rows;
  std::vector<std::vector<SequenceChunk>> member_chunks;
  int received_offset = 0;  // first row of this micro-batch's encoder rows in the received buffer
  int stage = 0;            // staged plans (RankWork::stages): its stage (pipeline_stage)
};

// Context parallelism's gathered keys (all_gather, a2a): element i is where sample-major key row i of the
// micro-batch sits in the rank-major result of an all-gather of every member's local rows. O(the
// micro-batch's rows): computed by the mechanisms that need it when the step builds them, not by the plan.
std::vector<int> key_order(const MicroBatchWork& mb);

// Staged plans: what this rank does in one stage on the encoder side.
struct EncoderStageWork {
  std::vector<int> items;  // global item numbers this rank encodes in the stage, in order
  RunRoute route;          // the stage's rows: send rows numbered within the stage's encoder output,
                           // received rows as in RankWork::item_route (the whole step's buffer)
};

struct RankWork {
  int group = -1;  // index of this rank's LLM group; -1: no LLM work
  std::vector<int> group_ranks;
  std::vector<MicroBatchWork> micro_batches;
  std::vector<int> items;  // global item numbers this rank encodes, in order
  RunRoute item_route;     // encoder output rows -> received encoder rows
  int received_rows = 0;   // encoder rows this rank's LLM chunks need
  // Staged plans only (disaggregated, or colocated with EncoderSchedule::per_micro_batch; empty otherwise):
  // one per stage, stages = the most micro-batches of any group.
  std::vector<EncoderStageWork> stages;
};

RankWork derive_rank_work(const StepPlan& plan, const GlobalBatch& batch, int rank, int world_size,
                          EncoderSchedule schedule = EncoderSchedule::per_step);

}  // namespace minimllm
