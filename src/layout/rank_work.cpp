#include "minimllm/layout/rank_work.hpp"

#include <algorithm>
#include <stdexcept>

namespace minimllm {
namespace {

// Samples of one micro-batch of a group: contiguous blocks (packed bins, or as even as possible).
std::vector<int> micro_batch_samples(const LlmGroup& group, int m) {
  return std::vector<int>(group.samples.begin() + micro_batch_begin(group, m),
                          group.samples.begin() + micro_batch_begin(group, m + 1));
}

// Calls visit(member, sample, begin, end) for every member's chunks of every sample of a micro-batch,
// member-major within each sample, each member's chunks in order — the order in which rows are numbered
// on their holders.
template <class Visit>
void for_each_chunk(const GlobalBatch& batch, const std::vector<int>& samples, int members, Visit&& visit) {
  for (int s : samples)
    for (int p = 0; p < members; ++p)
      for (const RowRange& r : load_balanced_chunks(batch.samples[s].tokens(), members, p))
        visit(p, s, r.begin, r.end);
}

}  // namespace

std::vector<RowRange> load_balanced_chunks(int tokens, int ranks, int member) {
  if (ranks <= 1) return {{0, tokens}};
  const auto bound = [&](int k) {
    return static_cast<int>(static_cast<long long>(tokens) * k / (2 * ranks));
  };
  const int late = 2 * ranks - 1 - member;
  return {{bound(member), bound(member + 1)}, {bound(late), bound(late + 1)}};
}

RankWork derive_rank_work(const StepPlan& plan, const GlobalBatch& batch, int rank, int world_size) {
  RankWork work;
  const std::vector<int> first_item = first_item_of_samples(batch);
  const int items = first_item.back();
  std::vector<int> row_offset(items + 1, 0);  // global row numbering, item by item
  for (size_t s = 0; s < batch.samples.size(); ++s)
    for (size_t i = 0; i < batch.samples[s].items.size(); ++i)
      row_offset[first_item[s] + i + 1] = row_offset[first_item[s] + i] + batch.samples[s].items[i].rows;

  // Where every row is produced: its owner's encoder rows follow the global item order.
  std::vector<int> src_rank(row_offset.back()), src_row(row_offset.back());
  std::vector<int> encoder_rows(world_size, 0);
  for (int item = 0; item < items; ++item) {
    const int owner = plan.item_owner[item];
    if (owner == rank) work.items.push_back(item);
    for (int p = row_offset[item]; p < row_offset[item + 1]; ++p)
      src_rank[p] = owner, src_row[p] = encoder_rows[owner]++;
  }

  // Disaggregated plans run as a pipeline: the stage of every item is its sample's (pipeline_stage).
  const bool pipelined = plan.placement == Placement::disaggregated;
  int stages = 1;
  for (const LlmGroup& group : plan.llm_groups) stages = std::max(stages, group.micro_batches);
  std::vector<int> stage_of_item(items, 0);
  if (pipelined)
    for (const LlmGroup& group : plan.llm_groups) {
      const int parts = group.micro_batches;
      for (int m = 0; m < parts; ++m)
        for (int i = micro_batch_begin(group, m); i < micro_batch_begin(group, m + 1); ++i) {
          const int s = group.samples[i];
          for (int item = first_item[s]; item < first_item[s + 1]; ++item)
            stage_of_item[item] = pipeline_stage(m, parts, stages);
        }
    }

  // Where every row is consumed: the group member whose chunk holds its fused row; received rows are
  // numbered per rank in (micro-batch, chunk, row) order, which is how the LLM input is packed.
  std::vector<int> dst_rank(row_offset.back(), -1), dst_row(row_offset.back(), -1);
  std::vector<int> received(world_size, 0);
  for (size_t g = 0; g < plan.llm_groups.size(); ++g) {
    const LlmGroup& group = plan.llm_groups[g];
    const int members = static_cast<int>(group.ranks.size());
    const auto me = std::find(group.ranks.begin(), group.ranks.end(), rank);
    const bool mine = me != group.ranks.end();
    if (mine) work.group = static_cast<int>(g), work.group_ranks = group.ranks;
    for (int m = 0; m < group.micro_batches; ++m) {
      MicroBatchWork mb;
      mb.samples = micro_batch_samples(group, m);
      mb.member_rows.assign(members, 0);
      mb.received_offset = mine ? received[rank] : 0;
      mb.stage = pipelined ? pipeline_stage(m, group.micro_batches, stages) : m;
      for_each_chunk(batch, mb.samples, members, [&](int p, int s, int begin, int end) {
        const SampleMeta& sample = batch.samples[s];
        const FusedLayout layout = fused_layout(sample);
        for (size_t i = 0; i < sample.items.size(); ++i) {
          const int first_row = layout.item_first_row[i], item = first_item[s] + static_cast<int>(i);
          for (int row = std::max(begin, first_row); row < std::min(end, first_row + sample.items[i].rows);
               ++row) {
            const int global_row = row_offset[item] + row - first_row;
            dst_rank[global_row] = group.ranks[p];
            dst_row[global_row] = received[group.ranks[p]]++;
          }
        }
        mb.member_rows[p] += end - begin;
        if (mine && group.ranks[p] == rank) mb.chunks.push_back({s, begin, end});
      });
      if (!mine) continue;
      // Gathered keys: rank-major (member by member, each in its own chunk order) -> sample-major.
      mb.sample_offsets.assign(1, 0);
      for (int s : mb.samples)
        mb.sample_offsets.push_back(mb.sample_offsets.back() + batch.samples[s].tokens());
      mb.kv_order.resize(mb.sample_offsets.back());
      std::vector<int> member_next(members, 0);
      for (int p = 1; p < members; ++p) member_next[p] = member_next[p - 1] + mb.member_rows[p - 1];
      int j = 0;
      mb.member_chunks.assign(members, {});
      for_each_chunk(batch, mb.samples, members, [&](int p, int s, int begin, int end) {
        while (mb.samples[j] != s) ++j;
        for (int row = begin; row < end; ++row) mb.kv_order[mb.sample_offsets[j] + row] = member_next[p]++;
        mb.member_chunks[p].push_back({s, begin, end});
      });
      work.micro_batches.push_back(std::move(mb));
    }
  }
  work.received_rows = received[rank];

  // This rank's side of the route, both sides listing rows in global row order.
  RowRoute& route = work.item_route;
  route.send_counts.assign(world_size, 0);
  route.recv_counts.assign(world_size, 0);
  std::vector<std::vector<int>> send(world_size), recv(world_size);
  for (int p = 0; p < row_offset.back(); ++p) {
    if (dst_rank[p] < 0) throw std::logic_error("derive_rank_work: a row has no LLM destination");
    if (src_rank[p] == rank) send[dst_rank[p]].push_back(src_row[p]);
    if (dst_rank[p] == rank) recv[src_rank[p]].push_back(dst_row[p]);
  }
  for (int r = 0; r < world_size; ++r) {
    route.send_counts[r] = static_cast<int>(send[r].size());
    route.recv_counts[r] = static_cast<int>(recv[r].size());
    route.send_rows.insert(route.send_rows.end(), send[r].begin(), send[r].end());
    route.recv_rows.insert(route.recv_rows.end(), recv[r].begin(), recv[r].end());
  }
  if (!pipelined) return work;

  // Per stage: the same rows, with each encoder rank's output numbered within the stage (its items of
  // the stage in global order), both sides still listing rows in global row order.
  work.stages.resize(stages);
  std::vector<std::vector<std::vector<int>>> stage_send(stages, std::vector<std::vector<int>>(world_size)),
      stage_recv(stages, std::vector<std::vector<int>>(world_size));
  std::vector<int> stage_rows(static_cast<size_t>(stages) * world_size, 0);  // rows per (stage, owner)
  for (int item = 0; item < items; ++item) {
    const int owner = plan.item_owner[item], m = stage_of_item[item];
    if (owner == rank) work.stages[m].items.push_back(item);
    for (int p = row_offset[item]; p < row_offset[item + 1]; ++p) {
      const int row = stage_rows[static_cast<size_t>(m) * world_size + owner]++;
      if (owner == rank) stage_send[m][dst_rank[p]].push_back(row);
      if (dst_rank[p] == rank) stage_recv[m][owner].push_back(dst_row[p]);
    }
  }
  for (int m = 0; m < stages; ++m) {
    RowRoute& r = work.stages[m].route;
    r.send_counts.assign(world_size, 0);
    r.recv_counts.assign(world_size, 0);
    for (int peer = 0; peer < world_size; ++peer) {
      r.send_counts[peer] = static_cast<int>(stage_send[m][peer].size());
      r.recv_counts[peer] = static_cast<int>(stage_recv[m][peer].size());
      r.send_rows.insert(r.send_rows.end(), stage_send[m][peer].begin(), stage_send[m][peer].end());
      r.recv_rows.insert(r.recv_rows.end(), stage_recv[m][peer].begin(), stage_recv[m][peer].end());
    }
  }
  return work;
}

}  // namespace minimllm
