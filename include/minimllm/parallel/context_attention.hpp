// Attention of a context-parallel group member's query rows against the keys of the whole group, by the
// run's mechanism (parallel.cp_comm, docs/PARALLELISM.md "Context parallelism inside a group"):
//   all_gather (GatheredAttention): every member's K|V collected before attention, dK|dV
//              reduce-scattered back after it; each block keeps the group's K|V for its backward.
//   p2p        (RingAttention): K|V blocks passed around the group's ring while the block before is
//              attended, partial results merged by their log-sum-exp; the backward passes K|V and dK|dV
//              around again; nothing of the other members' K|V is kept.
//   a2a        (UlyssesAttention): an all-to-all turns every member's rows of all heads into the group's
//              rows of a member's heads, attended whole, and another turns the output back; each block
//              keeps its head shard of the group's rows. Needs the group's size to divide the heads
//              (cp_comm_for_group: other groups run p2p).
// The model's blocks call it in place of the plain attention kernels; every member of the group calls it
// for the same blocks in the same order (its messages match by that order).
#pragma once

#include <memory>
#include <string>

#include "minimllm/config/run_config.hpp"
#include "minimllm/kernels/attention.hpp"
#include "minimllm/layout/rank_work.hpp"
#include "minimllm/parallel/communicator.hpp"

namespace minimllm {

class ContextAttention {
 public:
  virtual ~ContextAttention() = default;

  // What a block keeps for its backward beyond its own rows' activations, [rows, cols] (kv_full below):
  // all_gather, the group's K|V; a2a, its head shard of the group's Q|K|V, output and lse; p2p, nothing.
  struct Kept {
    int rows = 0, cols = 0;
  };
  virtual Kept kept_shape() const = 0;
  // attn [rows, w] and lse [rows, heads] of this rank's rows from their qkv [rows, 3w] (Q | K | V columns);
  // kv_full [kept_shape]: the block's kept state, written here. segs: the rows' segments against the
  // group's sample-major key rows (step/packing.hpp), which the all-gather attends.
  virtual void forward(const t_mat& qkv, const t_mat& kv_full, const AttentionSegments& segs,
                       AttentionShape shape, const t_mat& attn, const t_mat& lse) = 0;
  // attn and lse again from what forward kept (selective recomputation); a collective like forward.
  virtual void recompute(const t_mat& qkv, const t_mat& kv_full, const AttentionSegments& segs,
                         AttentionShape shape, const t_mat& attn, const t_mat& lse) = 0;
  // d_qkv [rows, 3w] (overwritten) from d_attn, for this rank's rows: dQ of its queries against every
  // key, dK|dV summed over every member's queries. d_kv_full: scratch of kv_full's shape.
  virtual void backward(const t_mat& d_attn, const t_mat& qkv, const t_mat& kv_full, const t_mat& attn,
                        const t_mat& lse, const AttentionSegments& segs, AttentionShape shape,
                        const t_mat& d_qkv, const t_mat& d_kv_full) = 0;
  // Seconds spent communicating so far: the collectives, or the ring's posting and waiting (the
  // transfers hidden behind attention are not counted; Phase::kv_exchange).
  virtual double seconds() const = 0;
};

// The mechanism of a group's micro-batch, cp_comm_for_group(mode, group size, this rank's heads); `shape`:
// this rank's heads (under tensor parallelism, its share) and their dimension. The communicator is the
// group's.
std::unique_ptr<ContextAttention> make_context_attention(CpComm mode, std::shared_ptr<Communicator> group,
                                                         const MicroBatchWork& mb, AttentionShape shape);

}  // namespace minimllm
