#include "minimllm/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "minimllm/data/random.hpp"
#include "minimllm/kernels/activation.hpp"
#include "minimllm/kernels/embedding.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/loss.hpp"
#include "minimllm/kernels/norm.hpp"
#include "minimllm/model/parameter_shards.hpp"

namespace minimllm {
// The linear layers of one transformer block: QKV, attention output, MLP in, MLP out.
std::vector<LinearShape> block_linear_shapes(int width, int hidden) {
  return {{width, 3 * width}, {width, width}, {width, hidden}, {hidden, width}};
}

std::vector<LinearShape> llm_linear_shapes(const LlmConfig& llm) {
  std::vector<LinearShape> shapes;
  for (int layer = 0; layer < llm.layers; ++layer) {
    for (const LinearShape& shape : block_linear_shapes(llm.width, llm.mlp_ratio * llm.width))
      shapes.push_back(shape);
  }
  shapes.push_back({llm.width, llm.vocab});  // LM head
  return shapes;
}

namespace {

constexpr std::uint64_t kInitStream = 0x1a17;

// How a weight is cut over its stack's tensor-parallel group (tensor_parallel.hpp).
enum class Split { none, rows, columns, qkv_columns };

// Places tensors in one buffer: matrices first (weight-decayed), then vectors. A counting pass (no
// buffer) measures both regions; a binding pass hands out views and records how to initialise them.
// Under tensor parallelism each matrix is this rank's slice in the group set by use().
class TensorBinder {
 public:
  struct Init {
    TensorRange range;   // where it lies, and this rank's slice of the whole tensor
    float std;           // 0: a norm weight, initialised to 1
    std::size_t tensor;  // the whole model's tensor number (its initial values depend on it)
  };

  explicit TensorBinder(int llm_tp) : llm_tp_(llm_tp) {}  // counting pass
  TensorBinder(int llm_tp, float* base, std::size_t vector_region)
      : llm_tp_(llm_tp), base_(base), vector_next_(vector_region) {}

  // The group of the tensors bound next (the encoder's or the LLM's).
  void use(const TensorParallel& group) { group_ = group; }
  // Whether this rank holds the tensors bound next (pipeline parallelism: its stage's); those it does not
  // hold are numbered all the same and get no storage (empty views).
  void hold(bool held) { held_ = held; }

  t_mat_um matrix(const std::string& name, int rows, int cols, float std, Split split = Split::none) {
    const AxisSlice whole_rows{rows}, whole_cols{cols};
    const AxisSlice r = split == Split::rows ? AxisSlice{rows, 1, group_.rank, group_.size} : whole_rows;
    const AxisSlice c = split == Split::columns       ? AxisSlice{cols, 1, group_.rank, group_.size}
                        : split == Split::qkv_columns ? AxisSlice{cols, 3, group_.rank, group_.size}
                                                      : whole_cols;
    const std::size_t n = static_cast<std::size_t>(r.local()) * c.local();
    const int replicas = split == Split::none ? llm_tp_ : llm_tp_ / group_.size;
    if (!next_held()) return t_mat_um();
    inits_.push_back({{name, matrix_next_, n, replicas, r, c}, std, tensors_ - 1});
    matrix_next_ += n;
    return base_ ? t_mat_um(base_ + matrix_next_ - n, r.local(), c.local()) : t_mat_um();
  }
  t_vec_um vector(const std::string& name, int n) {
    if (!next_held()) return t_vec_um();
    inits_.push_back({{name, vector_next_, static_cast<std::size_t>(n), llm_tp_, AxisSlice{1}, AxisSlice{n}},
                      0.0f,
                      tensors_ - 1});
    vector_next_ += n;
    return base_ ? t_vec_um(base_ + vector_next_ - n, n) : t_vec_um();
  }
  std::size_t matrix_elements() const { return matrix_next_; }
  std::size_t vector_elements() const { return vector_next_; }
  const std::vector<Init>& inits() const { return inits_; }

 private:
  // Numbers the next tensor; whether this rank holds it.
  bool next_held() {
    ++tensors_;
    return held_;
  }

  int llm_tp_ = 1;
  TensorParallel group_;
  bool held_ = true;
  std::size_t tensors_ = 0;
  float* base_ = nullptr;
  std::size_t matrix_next_ = 0, vector_next_ = 0;
  std::vector<Init> inits_;
};

BlockWeights bind_block(TensorBinder& b, const std::string& name, int width, int hidden, float std,
                        float out_std) {
  BlockWeights w;
  w.norm1 = b.vector(name + ".norm1", width);
  w.norm2 = b.vector(name + ".norm2", width);
  // Megatron's split: QKV and MLP-in by columns (heads, hidden units), their outputs' layers by rows.
  w.qkv = b.matrix(name + ".qkv", width, 3 * width, std, Split::qkv_columns);
  w.attn_out = b.matrix(name + ".attn_out", width, width, out_std, Split::rows);
  w.mlp_in = b.matrix(name + ".mlp_in", width, hidden, std, Split::columns);
  w.mlp_out = b.matrix(name + ".mlp_out", hidden, width, out_std, Split::rows);
  return w;
}

// The one place that says which tensors the model has, in buffer order. Under pipeline parallelism a rank
// holds its stage's: the first stage the encoder (unless it has a stage of its own) and the token
// embedding, the last the final norm and the LM head, each its own LLM blocks (ModelTensors::llm: those
// only).
ModelTensors bind_tensors(const ModelConfig& c, const ModelSharding& sharding, TensorBinder& b) {
  const EncoderConfig& e = c.vision();
  const LlmConfig& l = c.llm;
  const PipelineStage& stage = sharding.pipeline;
  const int first_layer = stage.first_layer, end_layer = first_layer + stage.layer_count(l.layers);
  const float std = c.init_std;
  ModelTensors t;
  b.use(sharding.encoder);
  b.hold(stage.holds_encoder());
  t.patch_embed = b.matrix("patch_embed", e.channels * e.patch * e.patch, e.width, std);
  // Residual-branch outputs are scaled down by depth (GPT-2) so the residual stream starts stable.
  const float enc_out_std = std / std::sqrt(2.0f * std::max(1, e.layers));
  for (int i = 0; i < e.layers; ++i) {
    const BlockWeights block =
        bind_block(b, "encoder." + std::to_string(i), e.width, e.mlp_ratio * e.width, std, enc_out_std);
    if (stage.holds_encoder()) t.encoder.push_back(block);
  }
  t.encoder_norm = b.vector("encoder_norm", e.width);
  t.projector_in = b.matrix("projector_in", e.width, l.width, std, Split::columns);
  t.projector_out = b.matrix("projector_out", l.width, l.width, std, Split::rows);
  b.use(sharding.llm);
  b.hold(stage.first());
  t.token_embed = b.matrix("token_embed", l.vocab, l.width, std, Split::rows);  // vocabulary-parallel
  const float llm_out_std = std / std::sqrt(2.0f * l.layers);
  for (int i = 0; i < l.layers; ++i) {
    const bool held = first_layer <= i && i < end_layer;
    b.hold(held);
    const BlockWeights block =
        bind_block(b, "llm." + std::to_string(i), l.width, l.mlp_ratio * l.width, std, llm_out_std);
    if (held) t.llm.push_back(block);
  }
  b.hold(stage.last());
  t.final_norm = b.vector("final_norm", l.width);
  t.lm_head = b.matrix("lm_head", l.width, l.vocab, std, Split::columns);
  return t;
}

// The units of Model::gradient_units(), each by its tensors' names, in the order a step's backward
// finishes them (LLM, then encoder).
std::vector<std::pair<std::string, std::vector<std::string>>> unit_tensor_names(const ModelConfig& c) {
  const auto block = [](const std::string& name) {
    std::vector<std::string> tensors;
    for (const char* t : {".norm1", ".norm2", ".qkv", ".attn_out", ".mlp_in", ".mlp_out"})
      tensors.push_back(name + t);
    return tensors;
  };
  std::vector<std::pair<std::string, std::vector<std::string>>> units;
  units.push_back({"llm.head", {"lm_head", "final_norm"}});
  for (int l = c.llm.layers - 1; l >= 0; --l)
    units.push_back({"llm." + std::to_string(l), block("llm." + std::to_string(l))});
  units.push_back({"token_embed", {"token_embed"}});
  units.push_back({"encoder.head", {"projector_out", "projector_in", "encoder_norm"}});
  for (int l = c.vision().layers - 1; l >= 0; --l)
    units.push_back({"encoder." + std::to_string(l), block("encoder." + std::to_string(l))});
  units.push_back({"patch_embed", {"patch_embed"}});
  return units;
}

// Tells `ready` of units [first, last).
void report_ready(GradientListener* ready, int first, int last) {
  if (ready)
    for (int u = first; u < last; ++u) ready->gradients_ready(u);
}

// Who keeps an allocation: the pass (from the model's workspace, valid until the pass's scope closes)
// or the caller (an ordinary allocation, as the encoder's activations, which outlive encoder_forward).
enum class Keeper { pass, caller };

t_mat uninitialized(const char* label, int rows, int cols, Keeper keeper = Keeper::pass) {
  if (keeper == Keeper::caller)
    return t_mat(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), rows, cols);
  return scratch_view<t_mat>(label, rows, cols);
}
t_vec uninitialized(const char* label, int n, Keeper keeper = Keeper::pass) {
  if (keeper == Keeper::caller)
    return t_vec(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), n);
  return scratch_view<t_vec>(label, n);
}
t_mat zeroed(const char* label, int rows, int cols) {
  const t_mat m = uninitialized(label, rows, cols);
  Kokkos::deep_copy(m, 0.0f);
  return m;
}

// The sizes of a stack's block activations: rows, model width, and this rank's share of the attention
// width (its heads' Q, K or V), the MLP hidden width and the heads (all of them without tensor
// parallelism); what a block keeps for context parallelism (ContextAttention::kept_shape; none without).
struct BlockDims {
  int rows, width, attention_width, hidden, heads;
  ContextAttention::Kept kept;
};

// A stack's block dimensions over `rows` rows on this rank of its tensor-parallel group.
BlockDims block_dims(int rows, int width, int mlp_ratio, int heads, const TensorParallel& tp,
                     ContextAttention::Kept kept) {
  return {rows, width, width / tp.size, mlp_ratio * width / tp.size, heads / tp.size, kept};
}

// The group's sum of this rank's partial result, in place (the all-reduce after a row-parallel layer,
// Megatron's g; of an input's gradient after a column-parallel one, its f).
void group_sum(const t_mat& m, const TensorParallel& tp) {
  if (tp.size > 1) tp.comm->allreduce_sum(m.data(), m.size());
}

// out = residual on the group's first rank, 0 on the others: a row-parallel layer then accumulates into
// out and group_sum adds the residual once.
void residual_once(const t_mat& out, const t_mat& residual, const TensorParallel& tp) {
  if (tp.rank == 0) {
    Kokkos::deep_copy(out, residual);
  } else {
    Kokkos::deep_copy(out, 0.0f);
  }
}

// A block's activations in three groups, by what recomputation drops.
enum ActivationGroup : unsigned {
  kBlockInput = 1u,     // x_in: always kept
  kAttentionCore = 2u,  // attn, lse
  kOtherActivations = 4u,
};

unsigned kept_groups(Recompute mode) {
  switch (mode) {
    case Recompute::none:
      return kBlockInput | kAttentionCore | kOtherActivations;
    case Recompute::selective:
      return kBlockInput | kOtherActivations;
    case Recompute::full:
      return kBlockInput;
  }
  return 0u;
}
// What the backward recomputes (and the forward uses without keeping).
unsigned dropped_groups(Recompute mode) {
  return (kBlockInput | kAttentionCore | kOtherActivations) & ~kept_groups(mode);
}

void allocate_groups(BlockActivations& a, const BlockDims& d, unsigned groups, Keeper keeper) {
  if (groups & kBlockInput) a.x_in = uninitialized("act::x_in", d.rows, d.width, keeper);
  if (groups & kAttentionCore) {
    a.attn = uninitialized("act::attn", d.rows, d.attention_width, keeper);
    a.lse = uninitialized("act::lse", d.rows, d.heads, keeper);
  }
  if (groups & kOtherActivations) {
    a.norm1 = uninitialized("act::norm1", d.rows, d.width, keeper);
    a.qkv = uninitialized("act::qkv", d.rows, 3 * d.attention_width, keeper);
    a.x_mid = uninitialized("act::x_mid", d.rows, d.width, keeper);
    a.norm2 = uninitialized("act::norm2", d.rows, d.width, keeper);
    a.mlp_pre = uninitialized("act::mlp_pre", d.rows, d.hidden, keeper);
    a.mlp_act = uninitialized("act::mlp_act", d.rows, d.hidden, keeper);
    a.kv_full = uninitialized("act::kv_full", d.kept.rows, d.kept.cols, keeper);
    a.rstd1 = uninitialized("act::rstd1", d.rows, keeper);
    a.rstd2 = uninitialized("act::rstd2", d.rows, keeper);
  }
}

// The activations a stack's forward keeps for the backward, one set per block.
std::vector<BlockActivations> allocate_kept(int layers, const BlockDims& d, Recompute mode, Keeper keeper) {
  std::vector<BlockActivations> blocks(layers);
  for (BlockActivations& a : blocks) allocate_groups(a, d, kept_groups(mode), keeper);
  return blocks;
}

// A block's activations for one use of them (its forward, or its backward): the kept ones, and the
// dropped ones from the workspace's innermost scope (the caller's per-block scope).
BlockActivations complete(const BlockActivations& kept, const BlockDims& d, Recompute mode) {
  BlockActivations a = kept;
  allocate_groups(a, d, dropped_groups(mode), Keeper::pass);
  return a;
}

// Workspace for one backward pass through a stack of blocks (reused by every block).
struct BlockScratch {
  t_mat d_hidden, d_norm, d_attn, d_qkv, d_kv_full;
  explicit BlockScratch(const BlockDims& d)
      : d_hidden(uninitialized("grad::d_hidden", d.rows, d.hidden)),
        d_norm(uninitialized("grad::d_norm", d.rows, d.width)),
        d_attn(uninitialized("grad::d_attn", d.rows, d.attention_width)),
        d_qkv(uninitialized("grad::d_qkv", d.rows, 3 * d.attention_width)),
        d_kv_full(uninitialized("grad::d_kv_full", d.kept.rows, d.kept.cols)) {}
};

// attn and lse from Q and the keys and values: the local rows' K|V, or under context parallelism the
// group's (its forward, or its selective recomputation from what the forward kept).
void attention_core_forward(BlockActivations& a, const AttentionSegments& segs, AttentionShape shape,
                            ContextAttention* cp, bool recomputing) {
  const int width = shape.heads * shape.head_dim;
  if (!cp) {
    attention_forward(columns(a.qkv, 0, width), columns(a.qkv, width, width),
                      columns(a.qkv, 2 * width, width), segs, shape, a.attn, a.lse);
  } else if (recomputing) {
    cp->recompute(a.qkv, a.kv_full, segs, shape, a.attn, a.lse);
  } else {
    cp->forward(a.qkv, a.kv_full, segs, shape, a.attn, a.lse);
  }
}

// A pre-norm block's activations from x_in, up to the MLP's activation (all the backward needs). Under
// tensor parallelism this rank's heads and hidden units; x_mid is the group's sum.
void block_activations_forward(const BlockWeights& w, BlockActivations& a, const AttentionSegments& segs,
                               AttentionShape shape, ContextAttention* kv, GemmPrecision p,
                               const TensorParallel& tp) {
  rmsnorm_forward(a.x_in, w.norm1, a.norm1, a.rstd1);
  gemm(Trans::no, Trans::no, 1.0f, a.norm1, w.qkv, 0.0f, a.qkv, p);
  attention_core_forward(a, segs, shape, kv, false);
  residual_once(a.x_mid, a.x_in, tp);
  gemm(Trans::no, Trans::no, 1.0f, a.attn, w.attn_out, 1.0f, a.x_mid, p);
  group_sum(a.x_mid, tp);
  rmsnorm_forward(a.x_mid, w.norm2, a.norm2, a.rstd2);
  gemm(Trans::no, Trans::no, 1.0f, a.norm2, w.mlp_in, 0.0f, a.mlp_pre, p);
  gelu_forward(a.mlp_pre, a.mlp_act);
}

// x_out = x_in + attn(norm1(x_in)) + mlp(norm2(...)): pre-norm transformer block.
void block_forward(const BlockWeights& w, BlockActivations& a, const t_mat& x_out,
                   const AttentionSegments& segs, AttentionShape shape, ContextAttention* kv, GemmPrecision p,
                   const TensorParallel& tp) {
  block_activations_forward(w, a, segs, shape, kv, p, tp);
  residual_once(x_out, a.x_mid, tp);
  gemm(Trans::no, Trans::no, 1.0f, a.mlp_act, w.mlp_out, 1.0f, x_out, p);
  group_sum(x_out, tp);
}

// Recomputes what the forward dropped (dropped_groups) into `a`, by the forward's own operations on the
// kept inputs, so the values are the forward's bit for bit. full: the whole block, under context
// parallelism with the K|V all-gather again (every group member recomputes its blocks in the same order,
// so the collectives match); selective: the attention core from the kept qkv (and kv_full).
void recompute_dropped(const BlockWeights& w, BlockActivations& a, const AttentionSegments& segs,
                       AttentionShape shape, ContextAttention* kv, GemmPrecision p, Recompute mode,
                       const TensorParallel& tp) {
  if (mode == Recompute::full) block_activations_forward(w, a, segs, shape, kv, p, tp);
  if (mode == Recompute::selective) attention_core_forward(a, segs, shape, kv, true);
}

// On entry dx is the gradient of the block's output; on exit, of its input. Weight gradients accumulate.
void block_backward(const BlockWeights& w, const BlockWeights& g, const BlockActivations& a, const t_mat& dx,
                    const AttentionSegments& segs, AttentionShape shape, BlockScratch& s,
                    ContextAttention* kv, GemmPrecision p, const TensorParallel& tp,
                    GradientListener* ready) {
  const int width = shape.heads * shape.head_dim;
  // Between the larger kernels, a chance for communication in flight (the gradient buckets) to progress.
  const auto poke = [ready] {
    if (ready) ready->progress();
  };
  gemm(Trans::no, Trans::yes, 1.0f, dx, w.mlp_out, 0.0f, s.d_hidden, p);
  gemm(Trans::yes, Trans::no, 1.0f, a.mlp_act, dx, 1.0f, g.mlp_out, p);
  poke();
  gelu_backward(s.d_hidden, a.mlp_pre, s.d_hidden);
  gemm(Trans::yes, Trans::no, 1.0f, a.norm2, s.d_hidden, 1.0f, g.mlp_in, p);
  gemm(Trans::no, Trans::yes, 1.0f, s.d_hidden, w.mlp_in, 0.0f, s.d_norm, p);
  group_sum(s.d_norm, tp);
  poke();
  rmsnorm_backward(s.d_norm, a.x_mid, w.norm2, a.rstd2, dx, g.norm2);

  gemm(Trans::no, Trans::yes, 1.0f, dx, w.attn_out, 0.0f, s.d_attn, p);
  gemm(Trans::yes, Trans::no, 1.0f, a.attn, dx, 1.0f, g.attn_out, p);
  poke();
  if (kv) {
    kv->backward(s.d_attn, a.qkv, a.kv_full, a.attn, a.lse, segs, shape, s.d_qkv, s.d_kv_full);
  } else {
    attention_backward(s.d_attn, columns(a.qkv, 0, width), columns(a.qkv, width, width),
                       columns(a.qkv, 2 * width, width), a.attn, a.lse, segs, shape,
                       columns(s.d_qkv, 0, width), columns(s.d_qkv, width, width),
                       columns(s.d_qkv, 2 * width, width));
  }
  poke();
  gemm(Trans::yes, Trans::no, 1.0f, a.norm1, s.d_qkv, 1.0f, g.qkv, p);
  gemm(Trans::no, Trans::yes, 1.0f, s.d_qkv, w.qkv, 0.0f, s.d_norm, p);
  group_sum(s.d_norm, tp);
  rmsnorm_backward(s.d_norm, a.x_in, w.norm1, a.rstd1, dx, g.norm1);
}

// What every block of a stack's pass shares: the activations' sizes, the attention segments and shape
// (this rank's heads), the K|V exchange (context parallelism; else null), the GEMM precision, what the
// blocks keep and the stack's tensor-parallel group.
struct StackPass {
  BlockDims dims;
  const AttentionSegments& segs;
  AttentionShape shape;
  ContextAttention* kv;
  GemmPrecision precision;
  Recompute mode;
  const TensorParallel& tp;
};

// The encoder's blocks over the input's patches (attention within each image).
StackPass encoder_stack(const EncoderConfig& e, const EncoderInput& input, GemmPrecision p, Recompute mode,
                        const TensorParallel& tp) {
  const BlockDims dims = block_dims(input.patches, e.width, e.mlp_ratio, e.heads, tp, {});
  return {dims, input.segments, {dims.heads, e.width / e.heads}, nullptr, p, mode, tp};
}

// The LLM's blocks over a micro-batch's rows (causal attention within each sample), the gathered K|V rows
// under context parallelism.
StackPass llm_stack(const LlmConfig& c, const LlmInput& input, ContextAttention* kv, GemmPrecision p,
                    Recompute mode, const TensorParallel& tp) {
  const BlockDims dims = block_dims(input.tokens, c.width, c.mlp_ratio, c.heads, tp,
                                    kv ? kv->kept_shape() : ContextAttention::Kept{});
  return {dims, input.segments, {dims.heads, c.width / c.heads}, kv, p, mode, tp};
}

// A block's forward into the activations it keeps, the others in a scope released after it.
void forward_keeping(const StackPass& pass, const BlockWeights& w, const BlockActivations& kept,
                     const t_mat& x_out) {
  const WorkspaceScope block_scope;
  BlockActivations a = complete(kept, pass.dims, pass.mode);
  block_forward(w, a, x_out, pass.segs, pass.shape, pass.kv, pass.precision, pass.tp);
}

// A block's backward after recomputing what its forward dropped, into a scope released after it.
void recompute_and_backward(const StackPass& pass, const BlockWeights& w, const BlockWeights& g,
                            const BlockActivations& kept, const t_mat& dx, BlockScratch& scratch,
                            GradientListener* ready) {
  const WorkspaceScope block_scope;
  BlockActivations a = complete(kept, pass.dims, pass.mode);
  recompute_dropped(w, a, pass.segs, pass.shape, pass.kv, pass.precision, pass.mode, pass.tp);
  block_backward(w, g, a, dx, pass.segs, pass.shape, scratch, pass.kv, pass.precision, pass.tp, ready);
}

// Forward+backward FLOPs of a linear layer [in, out] applied to `rows` rows (dX and dW in backward).
double linear_flops(double rows, int in, int out) { return 6.0 * rows * in * out; }

double block_flops(double rows, int width, int hidden) {
  double flops = 0.0;
  for (const LinearShape& shape : block_linear_shapes(width, hidden))
    flops += linear_flops(rows, shape.in, shape.out);
  return flops;
}

}  // namespace

std::size_t parameter_count(const ModelConfig& config, const ModelSharding& sharding) {
  TensorBinder counter(sharding.llm.size);
  bind_tensors(config, sharding, counter);
  return counter.matrix_elements() + counter.vector_elements();
}

std::size_t parameter_count(const ModelConfig& config) { return parameter_count(config, ModelSharding{}); }

std::vector<TensorRange> tensor_ranges(const ModelConfig& config, const ModelSharding& sharding) {
  TensorBinder counter(sharding.llm.size);
  bind_tensors(config, sharding, counter);
  TensorBinder placer(sharding.llm.size, nullptr, counter.matrix_elements());  // offsets, no views
  bind_tensors(config, sharding, placer);
  std::vector<TensorRange> ranges;
  for (const auto& init : placer.inits()) ranges.push_back(init.range);
  return ranges;
}

Model::Model(const ModelConfig& config, std::uint64_t seed, GemmPrecision precision, Recompute recompute,
             const ModelSharding& sharding, CpComm cp_comm)
    : config_(config), precision_(precision), recompute_(recompute), sharding_(sharding), cp_comm_(cp_comm) {
  const int tp = sharding_.llm.size;
  first_vocab_id_ = AxisSlice{config_.llm.vocab, 1, sharding_.llm.rank, tp}.begin(sharding_.llm.rank);
  stage_layers_ = sharding_.pipeline.layer_count(config_.llm.layers);
  TensorBinder counter(tp);
  bind_tensors(config_, sharding_, counter);
  decayed_count_ = counter.matrix_elements();
  const std::size_t total = counter.matrix_elements() + counter.vector_elements();
  params_ = t_vec("model::params", total);
  grads_ = t_vec("model::grads", total);
  TensorBinder param_binder(tp, params_.data(), decayed_count_),
      grad_binder(tp, grads_.data(), decayed_count_);
  weights_ = bind_tensors(config_, sharding_, param_binder);
  weight_grads_ = bind_tensors(config_, sharding_, grad_binder);
  tensor_ranges_ = minimllm::tensor_ranges(config_, sharding_);
  // A pipeline stage's units: those of the tensors it holds.
  std::size_t in_units = 0;
  for (const auto& [name, tensors] : unit_tensor_names(config_)) {
    GradientUnit unit{name, {}};
    for (const std::string& tensor : tensors)
      for (const TensorRange& range : tensor_ranges_)
        if (range.name == tensor) unit.tensors.push_back(range);
    if (unit.tensors.empty()) continue;
    in_units += unit.tensors.size();
    if (name.rfind("encoder", 0) != 0 && name != "patch_embed") ++llm_units_;
    gradient_units_.push_back(std::move(unit));
  }
  if (in_units != tensor_ranges_.size())
    throw std::logic_error("Model: the gradient units do not cover every tensor exactly once");

  // Initial values depend only on (seed, tensor, element of the whole tensor): identical on every rank,
  // and a tensor-parallel slice holds the whole model's values.
  auto host = Kokkos::create_mirror_view(params_);
  const auto& inits = param_binder.inits();
  for (std::size_t t = 0; t < inits.size(); ++t) {
    const TensorRange& range = inits[t].range;
    const float std = inits[t].std;
    const std::uint64_t tensor_hash = hash_coords({seed, kInitStream, inits[t].tensor});
    for (std::size_t i = 0; i < range.count; ++i) {
      const std::uint64_t h = hash_extend(tensor_hash, whole_tensor_index(range, i));
      host(range.offset + i) =
          std == 0.0f ? 1.0f : std * static_cast<float>(standard_normal(h, splitmix64(h)));
    }
  }
  transfer(params_, host);
}

void Model::zero_grads() { Kokkos::deep_copy(grads_, 0.0f); }

void Model::encoder_forward(const EncoderInput& input, EncoderActivations& acts) const {
  const EncoderConfig& e = config_.vision();
  const int rows = input.patches, width = e.width;
  const StackPass pass = encoder_stack(e, input, precision_, recompute_, sharding_.encoder);
  // The projector's hidden units: this rank's slice (column-parallel in, row-parallel out).
  const int projector_hidden = static_cast<int>(weights_.projector_in.extent(1));
  acts.blocks = allocate_kept(e.layers, pass.dims, recompute_, Keeper::caller);
  acts.x_final = uninitialized("enc::x_final", rows, width, Keeper::caller);
  acts.normed = uninitialized("enc::normed", rows, width, Keeper::caller);
  acts.rstd = uninitialized("enc::rstd", rows, Keeper::caller);
  acts.proj_pre = uninitialized("enc::proj_pre", rows, projector_hidden, Keeper::caller);
  acts.proj_act = uninitialized("enc::proj_act", rows, projector_hidden, Keeper::caller);
  acts.embeddings = uninitialized("enc::embeddings", rows, config_.llm.width, Keeper::caller);
  if (rows == 0) return;
  const WorkspaceScope scope(workspace_);  // the kernels' temporaries

  const ModelTensors& w = weights_;
  gemm(Trans::no, Trans::no, 1.0f, input.pixels, w.patch_embed, 0.0f,
       e.layers ? acts.blocks[0].x_in : acts.x_final, precision_);
  for (int l = 0; l < e.layers; ++l)
    forward_keeping(pass, w.encoder[l], acts.blocks[l],
                    l + 1 < e.layers ? acts.blocks[l + 1].x_in : acts.x_final);
  rmsnorm_forward(acts.x_final, w.encoder_norm, acts.normed, acts.rstd);
  gemm(Trans::no, Trans::no, 1.0f, acts.normed, w.projector_in, 0.0f, acts.proj_pre, precision_);
  gelu_forward(acts.proj_pre, acts.proj_act);
  gemm(Trans::no, Trans::no, 1.0f, acts.proj_act, w.projector_out, 0.0f, acts.embeddings, precision_);
  group_sum(acts.embeddings, sharding_.encoder);
}

void Model::encoder_backward(const EncoderInput& input, const EncoderActivations& acts,
                             const t_mat& d_embeddings, GradientListener* ready) {
  const EncoderConfig& e = config_.vision();
  const int rows = input.patches, width = e.width;
  const int first_unit = llm_gradient_units(), units = static_cast<int>(gradient_units_.size());
  if (rows == 0) return report_ready(ready, first_unit, units);
  const StackPass pass = encoder_stack(e, input, precision_, recompute_, sharding_.encoder);
  const ModelTensors &w = weights_, &g = weight_grads_;
  const WorkspaceScope scope(workspace_);

  t_mat d_proj = uninitialized("enc::d_proj", rows, static_cast<int>(w.projector_in.extent(1)));
  gemm(Trans::no, Trans::yes, 1.0f, d_embeddings, w.projector_out, 0.0f, d_proj, precision_);
  gemm(Trans::yes, Trans::no, 1.0f, acts.proj_act, d_embeddings, 1.0f, g.projector_out, precision_);
  gelu_backward(d_proj, acts.proj_pre, d_proj);
  gemm(Trans::yes, Trans::no, 1.0f, acts.normed, d_proj, 1.0f, g.projector_in, precision_);
  t_mat d_normed = uninitialized("enc::d_normed", rows, width);
  gemm(Trans::no, Trans::yes, 1.0f, d_proj, w.projector_in, 0.0f, d_normed, precision_);
  group_sum(d_normed, sharding_.encoder);
  const t_mat dx = zeroed("enc::dx", rows, width);
  rmsnorm_backward(d_normed, acts.x_final, w.encoder_norm, acts.rstd, dx, g.encoder_norm);
  report_ready(ready, first_unit, first_unit + 1);
  BlockScratch scratch(pass.dims);
  for (int l = e.layers - 1; l >= 0; --l) {
    recompute_and_backward(pass, w.encoder[l], g.encoder[l], acts.blocks[l], dx, scratch, ready);
    const int unit = first_unit + e.layers - l;
    report_ready(ready, unit, unit + 1);
  }
  // The pixels need no gradient: only the patch embedding's weights.
  gemm(Trans::yes, Trans::no, 1.0f, input.pixels, dx, 1.0f, g.patch_embed, precision_);
  report_ready(ready, units - 1, units);
}

double Model::llm_forward_backward(const LlmInput& input, const t_mat_const& received, float grad_scale,
                                   const t_mat& d_received, ContextAttention* kv, GradientListener* ready) {
  if (input.tokens == 0 && !kv) {
    report_ready(ready, 0, llm_gradient_units());
    return 0.0;
  }
  const WorkspaceScope scope(workspace_);  // every activation and temporary of this micro-batch
  LlmStageActivations acts;
  stage_forward(input, received, t_mat_const(), grad_scale, kv, false, acts);
  stage_backward(input, acts, t_mat_const(), t_mat(), d_received, kv, ready);
  return acts.loss_sum;
}

void Model::llm_stage_forward(const LlmInput& input, const t_mat_const& received, const t_mat_const& x_in,
                              float grad_scale, ContextAttention* kv, LlmStageActivations& acts) {
  acts = LlmStageActivations();
  if (input.tokens == 0 && !kv) {
    acts.x_out = uninitialized("llm::x_out", 0, config_.llm.width, Keeper::caller);
    return;
  }
  const WorkspaceScope scope(workspace_);  // the pass's temporaries
  stage_forward(input, received, x_in, grad_scale, kv, true, acts);
}

void Model::llm_stage_backward(const LlmInput& input, const LlmStageActivations& acts,
                               const t_mat_const& d_out, const t_mat& d_in, const t_mat& d_received,
                               ContextAttention* kv, GradientListener* ready) {
  if (input.tokens == 0 && !kv) return report_ready(ready, 0, llm_gradient_units());
  const WorkspaceScope scope(workspace_);
  stage_backward(input, acts, d_out, d_in, d_received, kv, ready);
}

void Model::stage_forward(const LlmInput& input, const t_mat_const& received, const t_mat_const& x_in,
                          float grad_scale, ContextAttention* kv, bool keep_beyond_scope,
                          LlmStageActivations& acts) {
  const TensorParallel& tp = sharding_.llm;
  const PipelineStage& stage = sharding_.pipeline;
  const int rows = input.tokens, width = config_.llm.width;
  const Keeper keeper = keep_beyond_scope ? Keeper::caller : Keeper::pass;
  const StackPass pass = llm_stack(config_.llm, input, kv, precision_, recompute_, sharding_.llm);
  const ModelTensors &w = weights_, &g = weight_grads_;

  acts.blocks = allocate_kept(stage_layers_, pass.dims, recompute_, keeper);
  acts.x_out = uninitialized("llm::x_out", rows, width, keeper);
  const t_mat& x0 = acts.blocks[0].x_in;
  if (!stage.first()) {
    Kokkos::deep_copy(x0, x_in);
  } else if (tp.size > 1) {  // vocabulary-parallel: each rank its slice's ids, the group's sum every row
    Kokkos::deep_copy(x0, 0.0f);
    embedding_slice_forward(input.text_ids, input.text_rows, w.token_embed, first_vocab_id_, x0);
    group_sum(x0, tp);
  } else {
    embedding_forward(input.text_ids, input.text_rows, w.token_embed, x0);
  }
  if (stage.first()) copy_rows(received, input.image_src_rows, x0, input.image_rows);
  for (int l = 0; l < stage_layers_; ++l)
    forward_keeping(pass, w.llm[l], acts.blocks[l],
                    l + 1 < stage_layers_ ? acts.blocks[l + 1].x_in : acts.x_out);
  if (!stage.last()) return;
  t_mat normed = uninitialized("llm::normed", rows, width);
  acts.rstd = uninitialized("llm::rstd", rows, keeper);
  rmsnorm_forward(acts.x_out, w.final_norm, normed, acts.rstd);
  // The LM head and the loss in chunks of rows: never a [rows, vocab] logits matrix.
  t_vec losses = uninitialized("llm::losses", rows);
  acts.d_normed = uninitialized("llm::d_normed", rows, width, keeper);
  if (tp.size > 1) {
    vocab_parallel_loss(normed, input.targets, grad_scale, losses, acts.d_normed);
  } else {
    lm_head_xent_forward_backward(normed, w.lm_head, input.targets, grad_scale, losses, g.lm_head,
                                  acts.d_normed, precision_);
  }
  acts.loss_sum = sum(losses);
}

void Model::stage_backward(const LlmInput& input, const LlmStageActivations& acts, const t_mat_const& d_out,
                           const t_mat& d_in, const t_mat& d_received, ContextAttention* kv,
                           GradientListener* ready) {
  const PipelineStage& stage = sharding_.pipeline;
  const int rows = input.tokens, width = config_.llm.width;
  const StackPass pass = llm_stack(config_.llm, input, kv, precision_, recompute_, sharding_.llm);
  const ModelTensors &w = weights_, &g = weight_grads_;
  int unit = 0;  // the next of this stage's units to finish: the head (last stage), blocks, embedding
  const t_mat dx = zeroed("llm::dx", rows, width);
  if (stage.last()) {
    rmsnorm_backward(acts.d_normed, acts.x_out, w.final_norm, acts.rstd, dx, g.final_norm);
    report_ready(ready, unit, unit + 1);
    ++unit;
  } else {
    Kokkos::deep_copy(dx, d_out);
  }
  BlockScratch scratch(pass.dims);
  for (int l = stage_layers_ - 1; l >= 0; --l, ++unit) {
    recompute_and_backward(pass, w.llm[l], g.llm[l], acts.blocks[l], dx, scratch, ready);
    report_ready(ready, unit, unit + 1);
  }
  if (!stage.first()) return Kokkos::deep_copy(d_in, dx);
  embedding_slice_backward(input.text_ids, input.text_rows, dx, first_vocab_id_, g.token_embed);
  report_ready(ready, unit, unit + 1);
  copy_rows(dx, input.image_rows, d_received, input.image_src_rows);
}

void Model::vocab_parallel_loss(const t_mat& normed, const t_ivec_const& targets, float grad_scale,
                                const t_vec& losses, const t_mat& d_normed) {
  const TensorParallel& tp = sharding_.llm;
  const int rows = static_cast<int>(normed.extent(0));
  const int chunk_rows = std::min(rows, lm_head_chunk_rows(config_.llm.vocab));
  // Each chunk's rows' (max, sum of exp, target logit), gathered slice-major over the group.
  const t_mat gathered = uninitialized("llm::softmax_stats", tp.size * chunk_rows, 3);
  const SoftmaxStatsCombine combine = [&](const t_mat& stats) {
    const std::size_t floats = stats.size();
    const t_mat all = Kokkos::subview(
        gathered, std::make_pair(0, tp.size * static_cast<int>(stats.extent(0))), Kokkos::ALL());
    tp.comm->allgatherv(stats.data(), floats, all.data(), std::vector<std::size_t>(tp.size, floats));
    combine_softmax_stats(all, tp.size, stats);
  };
  lm_head_xent_vocab_slice(normed, weights_.lm_head, first_vocab_id_, targets, grad_scale, losses,
                           weight_grads_.lm_head, d_normed, precision_, std::max(1, chunk_rows), combine);
  group_sum(d_normed, tp);
}

double Model::encoder_flops(const EncoderInput& enc) const {
  const EncoderConfig& e = config_.vision();
  const double p = enc.patches;
  double flops = 4.0 * p * e.channels * e.patch * e.patch * e.width;  // patch embedding: no pixel gradient
  flops += e.layers * (block_flops(p, e.width, e.mlp_ratio * e.width) + 12.0 * enc.attention_pairs * e.width);
  flops +=
      linear_flops(p, e.width, config_.llm.width) + linear_flops(p, config_.llm.width, config_.llm.width);
  return flops / sharding_.encoder.size;
}

double Model::llm_flops(const LlmInput& llm) const {
  const LlmConfig& c = config_.llm;
  const double t = llm.tokens;
  // This stage's linear layers (llm_linear_shapes' order: its blocks', then the LM head's)...
  double linear = 0.0;
  const std::vector<LinearShape> shapes = llm_linear_shapes(c);
  const auto per_block = static_cast<int>(block_linear_shapes(c.width, c.mlp_ratio * c.width).size());
  const int first = sharding_.pipeline.first_layer * per_block;
  for (int i = first; i < first + stage_layers_ * per_block; ++i)
    linear += linear_flops(t, shapes[i].in, shapes[i].out);
  if (sharding_.pipeline.last()) linear += linear_flops(t, shapes.back().in, shapes.back().out);
  // ... and attention: 4 FLOPs per visible pair and feature forward, twice that backward.
  return (linear + stage_layers_ * 12.0 * llm.attention_pairs * c.width) / sharding_.llm.size;
}

namespace {
// Floats per row of a stack's block activations: what the blocks keep from the forward, plus the one set
// of dropped activations that a block's forward and its recompute fill (a per-block scope), plus the
// backward's scratch.
double saved_per_row(int width, int hidden, int heads, int layers, Recompute mode) {
  const double block = 8.0 * width + 2.0 * hidden + heads + 2.0;
  const double attention_core = width + heads;  // attn, lse
  const double kept = mode == Recompute::none        ? block
                      : mode == Recompute::selective ? block - attention_core
                                                     : width;  // full: x_in
  const double one_block_recomputed = layers > 0 ? block - kept : 0.0;
  const double backward_scratch = hidden + 6.0 * width;  // BlockScratch + dx
  return layers * kept + one_block_recomputed + backward_scratch;
}
}  // namespace

namespace {

// Rows of LM-head logits alive at once: one chunk (lm_head_xent_forward_backward). `whole` counts every
// row instead: the planners' linear model, exact up to one chunk of rows and an upper bound beyond.
double logits_rows(const LlmConfig& c, std::int64_t rows, bool whole) {
  return static_cast<double>(whole ? rows : std::min<std::int64_t>(rows, lm_head_chunk_rows(c.vocab)));
}

// bf16: gemm rounds both operands of a GEMM into workspace scratch (floats on the host, 16-bit on CUDA),
// each at most as large as the largest operand of the pass: a chunk of the LM head's logits (chunk rows x
// vocab) or a weight matrix or an activation; rows: the pass's rows (LLM rows or encoder patches).
double rounded_bytes(const ModelConfig& config, GemmPrecision precision, std::int64_t rows, bool llm,
                     bool whole_logits) {
  if (precision != GemmPrecision::bf16) return 0.0;
  const EncoderConfig& e = config.vision();
  const LlmConfig& c = config.llm;
  const double operand =
      llm ? std::max(std::max(c.mlp_ratio * c.width, 3 * c.width) * static_cast<double>(rows),
                     static_cast<double>(c.vocab) * logits_rows(c, rows, whole_logits))
          : std::max({e.mlp_ratio * e.width, 3 * e.width, c.width, e.channels * e.patch * e.patch}) *
                static_cast<double>(rows);
  const double weights = static_cast<double>(c.width) * std::max(c.vocab, c.mlp_ratio * c.width);
  return 2.0 * std::max(operand, weights) * (kMemSpaceIsHostAccessible ? 4.0 : 2.0);
}

double llm_bytes(const ModelConfig& config, GemmPrecision precision, Recompute recompute, CpComm cp_comm,
                 std::int64_t llm_rows, std::int64_t key_rows, bool whole_logits) {
  const LlmConfig& c = config.llm;
  const double llm_row = saved_per_row(c.width, c.mlp_ratio * c.width, c.heads, c.layers, recompute) +
                         3.0 * c.width + 2.0 /* x_final, normed, d_normed, rstd, loss */ + 2.0 /* ids */;
  const double logits = static_cast<double>(c.vocab) * logits_rows(c, llm_rows, whole_logits);
  const double keys = static_cast<double>(key_rows), rows = static_cast<double>(llm_rows);
  double kv = 0.0;
  // What a block keeps per layer (full recomputation: the one block recomputed), plus one scratch of it.
  const double kept_sets = (recompute == Recompute::full ? std::min(c.layers, 1) : c.layers) + 1.0;
  // Attention backward's temporaries: per-head copies of Q, dO and dQ over the local rows, of K, V and
  // transposed K, V over the key rows (the ring's: one block's).
  double attention = 3.0 * c.width * rows + 4.0 * c.width * (key_rows > 0 ? keys : rows);
  if (key_rows > 0 && cp_comm == CpComm::all_gather) {
    // Gathered K|V, and the exchange's staging (this rank's K|V rows and the rank-major gathered rows).
    kv = kept_sets * 2.0 * c.width * keys + 2.0 * c.width * (rows + keys);
  } else if (key_rows > 0) {
    // The ring's backward, its largest call (ring_attention.cpp): two K|V blocks, two dK|dV accumulators
    // and one arriving, of the largest member's rows; dQ and its per-block part over the local rows.
    kv = 5.0 * 2.0 * c.width * keys + 2.0 * c.width * rows;
    if (cp_comm == CpComm::a2a) {
      // ulysses_attention.cpp, in units of the largest member's rows (the group's rows at a g-th of the
      // heads are at most as many floats): Q|K|V|O and lse kept; an exchange's staging (this rank's rows
      // by member, the group's rows), Q|K|V wide; attention's copies over the group's rows. A group whose
      // size does not divide the heads runs the ring: the larger of the two.
      kv = std::max(kv, kept_sets * (4.0 * c.width + c.heads) * keys + 3.0 * c.width * (rows + keys));
      attention = std::max(attention, 7.0 * c.width * keys);
    }
  }
  return 4.0 * (llm_row * rows + logits + kv + attention) +
         rounded_bytes(config, precision, llm_rows, true, whole_logits);
}

double all_bytes(const ModelConfig& config, GemmPrecision precision, Recompute recompute, CpComm cp_comm,
                 std::int64_t llm_rows, std::int64_t patches, std::int64_t key_rows, bool whole_logits) {
  const EncoderConfig& e = config.vision();
  const LlmConfig& c = config.llm;
  const double enc_row = saved_per_row(e.width, e.mlp_ratio * e.width, e.heads, e.layers, recompute) +
                         3.0 * e.width + 5.0 * c.width + e.channels * e.patch * e.patch + 1.0;
  // The boundary exchange's received rows and their gradient (about one per patch), and its packed rows
  // to send and receive, both directions (the executor's exchange workspace).
  const double boundary = 8.0 * c.width * patches;
  // The encoder's rounded operands reuse the LLM pass's workspace; only a larger need adds.
  const double encoder_rounded =
      std::max(0.0, rounded_bytes(config, precision, patches, false, whole_logits) -
                        rounded_bytes(config, precision, llm_rows, true, whole_logits));
  return llm_bytes(config, precision, recompute, cp_comm, llm_rows, key_rows, whole_logits) +
         4.0 * (enc_row * patches + boundary) + encoder_rounded;
}

}  // namespace

double rounded_operand_bytes(const ModelConfig& config, GemmPrecision precision, std::int64_t rows,
                             bool llm) {
  return rounded_bytes(config, precision, rows, llm, false);
}

double llm_pass_bytes(const ModelConfig& config, GemmPrecision precision, Recompute recompute,
                      std::int64_t llm_rows, std::int64_t key_rows, CpComm cp_comm) {
  return llm_bytes(config, precision, recompute, cp_comm, llm_rows, key_rows, false);
}

double activation_bytes(const ModelConfig& config, GemmPrecision precision, Recompute recompute,
                        std::int64_t llm_rows, std::int64_t patches, std::int64_t key_rows, CpComm cp_comm) {
  return all_bytes(config, precision, recompute, cp_comm, llm_rows, patches, key_rows, false);
}

MemoryModel memory_model(const ModelConfig& config, GemmPrecision precision, Recompute recompute,
                         int optimizer_shards, CpComm cp_comm) {
  // Secants over a range no micro-batch reaches: exact where the accounting is linear, an upper bound
  // below it where it is convex (the bf16 operands: max(cols x rows, weights)). The LM head's logits
  // chunk, min(rows, chunk) x vocab, is concave: counted per row (exact up to one chunk, above beyond).
  constexpr std::int64_t kRows = std::int64_t(1) << 24;
  const auto bytes = [&](std::int64_t rows, std::int64_t patches, std::int64_t keys, CpComm mode) {
    return all_bytes(config, precision, recompute, mode, rows, patches, keys, true);
  };
  MemoryModel m;
  m.state = training_state_bytes(parameter_count(config), optimizer_shards);
  m.fixed = bytes(0, 0, 0, cp_comm);
  // Per local row with and without context parallelism (the K|V staging and attention's copies move
  // from local to key rows), the larger; per key row with it. Under a2a also the ring's, which a group
  // whose size does not divide the heads runs (cp_comm_for_group).
  const auto per_row_with = [&](CpComm mode) {
    return (bytes(2 * kRows, 0, kRows, mode) - bytes(kRows, 0, kRows, mode)) / kRows;
  };
  const auto per_key_row = [&](CpComm mode) {
    return (bytes(kRows, 0, 2 * kRows, mode) - bytes(kRows, 0, kRows, mode)) / kRows;
  };
  m.per_row = std::max((bytes(kRows, 0, 0, cp_comm) - m.fixed) / kRows, per_row_with(cp_comm));
  m.per_key_row = per_key_row(cp_comm);
  if (cp_comm == CpComm::a2a) {
    m.per_row = std::max(m.per_row, per_row_with(CpComm::p2p));
    m.per_key_row_ring = per_key_row(CpComm::p2p);
  }
  m.keys_per_member = cp_comm != CpComm::all_gather;
  // Per row of the model's one encoder module, the vision encoder (model.encoder).
  m.per_encoder_row = {(bytes(0, kRows, 0, cp_comm) - m.fixed) / kRows};
  return m;
}

double Model::rounded_operand_bytes(std::int64_t rows, bool llm) const {
  return minimllm::rounded_operand_bytes(config_, precision_, rows, llm);
}

double Model::llm_pass_bytes(std::int64_t llm_rows, std::int64_t key_rows) const {
  return minimllm::llm_pass_bytes(config_, precision_, recompute_, llm_rows, key_rows, cp_comm_);
}

namespace {

ModelConfig with_llm_layers(ModelConfig config, int layers) {
  config.llm.layers = layers;
  return config;
}

}  // namespace

double Model::activation_bytes(std::int64_t llm_rows, std::int64_t patches, std::int64_t key_rows) const {
  const PipelineStage& stage = sharding_.pipeline;
  if (!stage.comm)
    return minimllm::activation_bytes(config_, precision_, recompute_, llm_rows, patches, key_rows, cp_comm_);
  // 1F1B keeps at most p - s micro-batches of the stage's layers (the encoder's own stage: none), the
  // encoder's patches only where the encoder is.
  const int kept_layers = stage.stage < 0 ? 0 : (stage.stages - stage.stage) * stage_layers_;
  return minimllm::activation_bytes(with_llm_layers(config_, std::max(1, kept_layers)), precision_,
                                    recompute_, stage.stage < 0 ? 0 : llm_rows,
                                    stage.holds_encoder() ? patches : 0, stage.stage < 0 ? 0 : key_rows,
                                    cp_comm_);
}

void Model::reserve_workspace(std::int64_t llm_rows, std::int64_t key_rows) {
  // Under pipeline parallelism the kept activations are allocated apart (several micro-batches in
  // flight): the arena holds a pass's temporaries, about one layer's.
  const ModelConfig pass = sharding_.pipeline.comm ? with_llm_layers(config_, 1) : config_;
  workspace_.reserve(static_cast<std::size_t>(
      minimllm::llm_pass_bytes(pass, precision_, recompute_, llm_rows, key_rows, cp_comm_)));
}

}  // namespace minimllm
