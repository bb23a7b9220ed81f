#include "minimllm/parallel/ring_attention.hpp"

#include <algorithm>
#include <cmath>

#include "minimllm/core/clock.hpp"
#include "minimllm/kernels/activation.hpp"
#include "minimllm/kernels/workspace.hpp"

namespace minimllm {
namespace {

// Message tags on the group's communicator: K|V blocks and dK|dV accumulators (each pair of neighbours
// sees both kinds in the order every member posts them).
constexpr int kKeysTag = 1, kGradientsTag = 2;

// One member's chunks of one sample: its first local row for the sample and the chunks, in row order.
struct SampleRows {
  int first_row = 0;
  std::vector<SequenceChunk> chunks;
};

// A member's chunks (MicroBatchWork::member_chunks) grouped by sample, in the member's row order.
std::vector<SampleRows> by_sample(const std::vector<SequenceChunk>& chunks) {
  std::vector<SampleRows> out;
  int row = 0;
  for (const SequenceChunk& c : chunks) {
    if (out.empty() || out.back().chunks.front().sample != c.sample) out.push_back({row, {}});
    out.back().chunks.push_back(c);
    row += c.end - c.begin;
  }
  return out;
}

// This rank's query segments against member p's rows, one per query chunk at most. A member's rows of a
// sample are in row order, so the keys a query at position x sees form a prefix of them: p's rows of
// chunks that end before the query chunk (all visible), and, when p is this rank, the query chunk's own
// rows up to x. So one segment from p's first row of the sample, the causal offset the rows before.
SegmentTable member_segments(const MicroBatchWork& mb, int me, int p) {
  const std::vector<SampleRows> mine = by_sample(mb.member_chunks[me]),
                                theirs = by_sample(mb.member_chunks[p]);
  SegmentTable table;
  size_t k = 0;
  for (const SampleRows& queries : mine) {
    const int sample = queries.chunks.front().sample;
    while (k < theirs.size() && theirs[k].chunks.front().sample != sample) ++k;
    if (k == theirs.size()) break;
    int q_row = queries.first_row;
    for (const SequenceChunk& q : queries.chunks) {
      int before = 0;
      for (const SequenceChunk& c : theirs[k].chunks)
        if (c.end <= q.begin) before += c.end - c.begin;
      const int own = p == me ? q.end - q.begin : 0;
      if (q.end > q.begin && before + own > 0)
        table.add(q_row, q.end - q.begin, theirs[k].first_row, before + own, before);
      q_row += q.end - q.begin;
    }
  }
  return table;
}

}  // namespace

RingAttention::RingAttention(std::shared_ptr<Communicator> group, const MicroBatchWork& mb,
                             int attention_width)
    : group_(std::move(group)),
      rank_(group_->rank()),
      size_(group_->size()),
      attention_width_(attention_width),
      local_rows_(mb.member_rows.at(rank_)),
      max_rows_(*std::max_element(mb.member_rows.begin(), mb.member_rows.end())),
      member_rows_(mb.member_rows) {
  for (int p = 0; p < size_; ++p) segments_.push_back(make_segments(member_segments(mb, rank_, p), true));
}

t_mat RingAttention::block_of(const t_mat& buffer, int member) const {
  return Kokkos::subview(buffer, Kokkos::make_pair(0, member_rows_[member]), Kokkos::ALL);
}

void RingAttention::forward(const t_mat& qkv, const t_mat&, const AttentionSegments&, AttentionShape shape,
                            const t_mat& attn, const t_mat& lse) {
  const WorkspaceScope scope;
  const int w = attention_width_, left = (rank_ + size_ - 1) % size_, right = (rank_ + 1) % size_;
  const t_mat blocks[2] = {scratch_view<t_mat>("ring::kv", max_rows_, 2 * w),
                           scratch_view<t_mat>("ring::kv", max_rows_, 2 * w)};
  const t_mat part_out = scratch_view<t_mat>("ring::out", local_rows_, w);
  const t_mat part_lse = scratch_view<t_mat>("ring::lse", local_rows_, shape.heads);
  Kokkos::deep_copy(block_of(blocks[0], rank_), columns(qkv, w, 2 * w));
  for (int t = 0; t < size_; ++t) {
    const int owner = owner_at(t);
    const t_mat keys = block_of(blocks[t % 2], owner);
    std::unique_ptr<CommRequest> send, receive;
    if (t + 1 < size_) {
      const PhaseClock clock(times_, Phase::kv_exchange);
      const t_mat next = block_of(blocks[(t + 1) % 2], owner_at(t + 1));
      receive = group_->irecv(next.data(), next.size(), left, kKeysTag);
      send = group_->isend(keys.data(), keys.size(), right, kKeysTag);
    }
    const AttentionSegments& segs = segments_[owner];
    if (segs.count() > 0) {
      // Step 0 is this rank's own block, whose segments cover every one of its rows.
      const bool first = t == 0;
      if (!first) Kokkos::deep_copy(part_lse, INFINITY);
      attention_forward(columns(qkv, 0, w), columns(keys, 0, w), columns(keys, w, w), segs, shape,
                        first ? attn : part_out, first ? lse : part_lse);
      if (!first) attention_merge(attn, lse, part_out, part_lse, shape);
    }
    const PhaseClock clock(times_, Phase::kv_exchange);
    if (send) send->wait();
    if (receive) receive->wait();
  }
}

void RingAttention::backward(const t_mat& d_attn, const t_mat& qkv, const t_mat&, const t_mat& attn,
                             const t_mat& lse, const AttentionSegments&, AttentionShape shape,
                             const t_mat& d_qkv, const t_mat&) {
  const WorkspaceScope scope;
  const int w = attention_width_, left = (rank_ + size_ - 1) % size_, right = (rank_ + 1) % size_;
  const auto block_buffer = [&](const char* label) { return scratch_view<t_mat>(label, max_rows_, 2 * w); };
  const t_mat blocks[2] = {block_buffer("ring::kv"), block_buffer("ring::kv")};
  const t_mat gradients[2] = {block_buffer("ring::dkv"), block_buffer("ring::dkv")};
  const t_mat arriving = block_buffer("ring::dkv_in");
  const t_mat dq = scratch_view<t_mat>("ring::dq", local_rows_, w);
  const t_mat dq_part = scratch_view<t_mat>("ring::dq_part", local_rows_, w);
  Kokkos::deep_copy(block_of(blocks[0], rank_), columns(qkv, w, 2 * w));
  Kokkos::deep_copy(dq, 0.0f);
  std::unique_ptr<CommRequest> gradient_send;
  for (int t = 0; t < size_; ++t) {
    const int owner = owner_at(t);
    const t_mat keys = block_of(blocks[t % 2], owner), d_keys = block_of(gradients[t % 2], owner);
    std::unique_ptr<CommRequest> send, receive, gradient_receive;
    {
      const PhaseClock clock(times_, Phase::kv_exchange);
      if (t + 1 < size_) {
        const t_mat next = block_of(blocks[(t + 1) % 2], owner_at(t + 1));
        receive = group_->irecv(next.data(), next.size(), left, kKeysTag);
        send = group_->isend(keys.data(), keys.size(), right, kKeysTag);
      }
      // The owner's accumulator from the members that attended its block before this one.
      if (t > 0) {
        const t_mat in = block_of(arriving, owner);
        gradient_receive = group_->irecv(in.data(), in.size(), left, kGradientsTag);
      }
    }
    const AttentionSegments& segs = segments_[owner];
    if (segs.count() > 0) {
      Kokkos::deep_copy(dq_part, 0.0f);  // rows of no segment are not written
      attention_backward(d_attn, columns(qkv, 0, w), columns(keys, 0, w), columns(keys, w, w), attn, lse,
                         segs, shape, dq_part, columns(d_keys, 0, w), columns(d_keys, w, w));
      add_inplace(dq, dq_part);
    } else {
      Kokkos::deep_copy(d_keys, 0.0f);
    }
    const PhaseClock clock(times_, Phase::kv_exchange);
    if (gradient_receive) {
      gradient_receive->wait();
      add_inplace(d_keys, block_of(arriving, owner));
    }
    if (gradient_send) gradient_send->wait();  // its buffer is written again two steps on
    gradient_send = group_->isend(d_keys.data(), d_keys.size(), right, kGradientsTag);
    if (send) send->wait();
    if (receive) receive->wait();
  }
  // This rank's own accumulator, back from the last member to attend its block.
  const PhaseClock clock(times_, Phase::kv_exchange);
  const t_mat mine = block_of(arriving, rank_);
  group_->irecv(mine.data(), mine.size(), left, kGradientsTag)->wait();
  gradient_send->wait();
  Kokkos::deep_copy(columns(d_qkv, 0, w), dq);
  Kokkos::deep_copy(columns(d_qkv, w, 2 * w), mine);
}

}  // namespace minimllm
