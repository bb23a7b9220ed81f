#include "minimllm/layout/rank_work.hpp"

#include <algorithm>
#include <stdexcept>

namespace minimllm {
namespace {

// Context parallelism's chunks of a sequence of `tokens` rows over `members` (load_balanced_chunks), by
// position: chunk k of chunk_count() covers [bound(k), bound(k + 1)) and belongs to member owner(k).
struct ChunkGrid {
  long long tokens;
  int members;
  int chunk_count() const { return members <= 1 ? 1 : 2 * members; }
  int bound(int k) const {
    if (members <= 1) return k == 0 ? 0 : static_cast<int>(tokens);
    return static_cast<int>(tokens * k / (2 * members));
  }
  int owner(int k) const { return k < members ? k : 2 * members - 1 - k; }
  // The chunk holding row `row` (0 <= row < tokens): the last k with bound(k) <= row.
  int chunk_of(int row) const {
    if (members <= 1) return 0;
    int k = static_cast<int>(static_cast<long long>(row) * 2 * members / tokens);
    while (k + 1 < chunk_count() && bound(k + 1) <= row) ++k;
    while (k > 0 && bound(k) > row) --k;
    return k;
  }
};

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
  for (int s : samples) {
    const int tokens = batch.samples[s].tokens();
    for (int p = 0; p < members; ++p)
      for (const RowRange& r : load_balanced_chunks(tokens, members, p)) visit(p, s, r.begin, r.end);
  }
}

}  // namespace

std::vector<int> key_order(const MicroBatchWork& mb) {
  std::vector<int> order(mb.sample_offsets.empty() ? 0 : mb.sample_offsets.back());
  int next = 0;  // rank-major: member by member, each in its chunk order
  for (const std::vector<SequenceChunk>& chunks : mb.member_chunks) {
    size_t j = 0;
    for (const SequenceChunk& c : chunks) {
      while (mb.samples[j] != c.sample) ++j;
      for (int row = c.begin; row < c.end; ++row) order[mb.sample_offsets[j] + row] = next++;
    }
  }
  return order;
}

int stage_count(const StepPlan& plan) {
  int stages = 1;
  for (const LlmGroup& group : plan.llm_groups) stages = std::max(stages, group.micro_batches);
  return stages;
}

std::vector<int> item_stages(const StepPlan& plan, const std::vector<int>& first_item) {
  const int stages = stage_count(plan);
  std::vector<int> stage_of_item(first_item.back(), 0);
  for (const LlmGroup& group : plan.llm_groups) {
    const int parts = group.micro_batches;
    for (int m = 0; m < parts; ++m)
      for (int i = micro_batch_begin(group, m); i < micro_batch_begin(group, m + 1); ++i) {
        const int s = group.samples[i];
        for (int item = first_item[s]; item < first_item[s + 1]; ++item)
          stage_of_item[item] = pipeline_stage(m, parts, stages);
      }
  }
  return stage_of_item;
}

std::vector<RowRange> load_balanced_chunks(int tokens, int ranks, int member) {
  if (ranks <= 1) return {{0, tokens}};
  const ChunkGrid grid{tokens, ranks};
  const int late = 2 * ranks - 1 - member;
  return {{grid.bound(member), grid.bound(member + 1)}, {grid.bound(late), grid.bound(late + 1)}};
}

namespace {

// Rows [offset, offset + count) of an item, all held by LLM rank `rank`, received there as its rows
// [received, received + count).
struct ItemPiece {
  int offset = 0, count = 0, rank = 0, received = 0;
};

using PeerRuns = std::vector<std::vector<RowRun>>;  // per peer, its rows' runs in order

int rows_of(const std::vector<RowRun>& runs) {
  int rows = 0;
  for (const RowRun& run : runs) rows += run.count;
  return rows;
}

// This rank's side of a route from the rows it sends and receives, listed per peer.
RunRoute concatenated_route(const PeerRuns& send, const PeerRuns& recv) {
  RunRoute route;
  for (size_t peer = 0; peer < send.size(); ++peer) {
    route.send_counts.push_back(rows_of(send[peer]));
    route.recv_counts.push_back(rows_of(recv[peer]));
    route.send_runs.insert(route.send_runs.end(), send[peer].begin(), send[peer].end());
    route.recv_runs.insert(route.recv_runs.end(), recv[peer].begin(), recv[peer].end());
  }
  return route;
}

}  // namespace

// The routes are built from pieces of items (an item's rows cut by the chunks of its sample), never row by
// row: the work is O(items + pieces + this rank's rows) whatever the step's total rows, so every rank
// derives its work in milliseconds at thousands of ranks.
RankWork derive_rank_work(const StepPlan& plan, const GlobalBatch& batch, int rank, int world_size,
                          EncoderSchedule schedule) {
  RankWork work;
  const std::vector<int> first_item = first_item_of_samples(batch);
  const int items = first_item.back();
  std::vector<int> item_rows, item_first_row;  // per item: rows, first row in its sample's sequence
  item_rows.reserve(items), item_first_row.reserve(items);
  for (const SampleMeta& sample : batch.samples) {
    append_item_first_rows(sample, item_first_row);
    for (const EncoderItem& item : sample.items) item_rows.push_back(item.rows);
  }
  for (int item = 0; item < items; ++item)
    if (plan.item_owner[item] == rank) work.items.push_back(item);

  // Disaggregated plans run as a pipeline, and a colocated plan's encoder may run per micro-batch: the
  // stage of every item is then its sample's (pipeline_stage).
  const bool pipelined =
      plan.placement == Placement::disaggregated || schedule == EncoderSchedule::per_micro_batch;
  const int stages = stage_count(plan);
  const std::vector<int> stage_of_item =
      pipelined ? item_stages(plan, first_item) : std::vector<int>(items, 0);

  // Where every item's rows are consumed: the group members whose chunks hold them; received rows are
  // numbered per rank in (micro-batch, sample, row) order, which is how the LLM input is packed.
  std::vector<ItemPiece> cut;  // in (group, micro-batch, sample, item) order; item_of_piece alongside
  std::vector<int> item_of_piece;
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
      mb.received_offset = mine ? received[rank] : 0;
      mb.stage = pipelined ? pipeline_stage(m, group.micro_batches, stages) : m;
      for (int s : mb.samples) {
        const ChunkGrid grid{batch.samples[s].tokens(), members};
        for (int item = first_item[s]; item < first_item[s + 1]; ++item) {
          const int begin = item_first_row[item], end = begin + item_rows[item];
          for (int k = begin < end ? grid.chunk_of(begin) : grid.chunk_count();
               k < grid.chunk_count() && grid.bound(k) < end; ++k) {
            const int lo = std::max(begin, grid.bound(k)), hi = std::min(end, grid.bound(k + 1));
            if (lo >= hi) continue;
            const int holder = group.ranks[grid.owner(k)];
            cut.push_back({lo - begin, hi - lo, holder, received[holder]});
            item_of_piece.push_back(item);
            received[holder] += hi - lo;
          }
        }
      }
      if (!mine) continue;
      mb.member_rows.assign(members, 0);
      for_each_chunk(batch, mb.samples, members, [&](int p, int s, int begin, int end) {
        mb.member_rows[p] += end - begin;
        if (group.ranks[p] == rank) mb.chunks.push_back({s, begin, end});
      });
      mb.sample_offsets.assign(1, 0);
      for (int s : mb.samples)
        mb.sample_offsets.push_back(mb.sample_offsets.back() + batch.samples[s].tokens());
      mb.member_chunks.assign(members, {});
      for_each_chunk(batch, mb.samples, members, [&](int p, int s, int begin, int end) {
        mb.member_chunks[p].push_back({s, begin, end});
      });
      work.micro_batches.push_back(std::move(mb));
    }
  }
  work.received_rows = received[rank];
  // The pieces item by item (a counting sort: each item's pieces stay in row order).
  std::vector<int> first_piece(items + 1, 0), placed(items, 0);
  for (size_t i = 0; i < cut.size(); ++i)
    ++first_piece[item_of_piece[i] + 1], placed[item_of_piece[i]] += cut[i].count;
  for (int item = 0; item < items; ++item) {
    if (placed[item] != item_rows[item])
      throw std::logic_error("derive_rank_work: a row has no LLM destination");
    first_piece[item + 1] += first_piece[item];
  }
  std::vector<ItemPiece> pieces(cut.size());
  std::vector<int> next_piece(first_piece.begin(), first_piece.end() - 1);
  for (size_t i = 0; i < cut.size(); ++i) pieces[next_piece[item_of_piece[i]]++] = cut[i];

  // Both sides of a route list rows in global row order (item by item, each item's pieces in row order);
  // an encoder rank numbers its output rows over its items in that order, for a stage's route within the
  // stage. A piece is a run of rows on both sides: O(pieces), whatever the rows.
  PeerRuns send(world_size), recv(world_size);
  std::vector<PeerRuns> stage_send(pipelined ? stages : 0, PeerRuns(world_size)), stage_recv = stage_send;
  int sent_rows = 0;                                       // this rank's output rows before the item
  std::vector<int> stage_sent(pipelined ? stages : 0, 0);  // the same within each stage
  for (int item = 0; item < items; ++item) {
    const int owner = plan.item_owner[item], m = stage_of_item[item];
    for (int i = first_piece[item]; i < first_piece[item + 1]; ++i) {
      const ItemPiece& piece = pieces[i];
      if (owner == rank) {
        append_run(send[piece.rank], sent_rows + piece.offset, piece.count);
        if (pipelined) append_run(stage_send[m][piece.rank], stage_sent[m] + piece.offset, piece.count);
      }
      if (piece.rank == rank) {
        append_run(recv[owner], piece.received, piece.count);
        if (pipelined) append_run(stage_recv[m][owner], piece.received, piece.count);
      }
    }
    if (owner != rank) continue;
    sent_rows += item_rows[item];
    if (pipelined) stage_sent[m] += item_rows[item];
  }
  work.item_route = concatenated_route(send, recv);
  if (!pipelined) return work;
  work.stages.resize(stages);
  for (int item : work.items) work.stages[stage_of_item[item]].items.push_back(item);
  for (int m = 0; m < stages; ++m) work.stages[m].route = concatenated_route(stage_send[m], stage_recv[m]);
  return work;
}

}  // namespace minimllm
