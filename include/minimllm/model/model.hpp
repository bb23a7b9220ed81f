// The multimodal transformer: vision encoder (patch embedding, pre-norm blocks with attention inside
// each image, projector MLP) and decoder LLM (token embedding, pre-norm causal blocks over packed
// samples, final norm, LM head). Parameters and gradients each live in one contiguous buffer; the
// named tensors are unmanaged views into them, so one all-reduce syncs and one loop updates everything.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "minimllm/config/recompute.hpp"
#include "minimllm/config/run_config.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/workspace.hpp"
#include "minimllm/layout/memory_model.hpp"
#include "minimllm/model/model_inputs.hpp"
#include "minimllm/parallel/context_attention.hpp"
#include "minimllm/parallel/tensor_parallel.hpp"

namespace minimllm {

struct BlockWeights {
  t_vec_um norm1, norm2;  // [width]
  t_mat_um qkv;           // [width, 3*width]
  t_mat_um attn_out;      // [width, width]
  t_mat_um mlp_in;        // [width, mlp_ratio*width]
  t_mat_um mlp_out;       // [mlp_ratio*width, width]
};

struct ModelTensors {
  t_mat_um patch_embed;  // [channels*patch*patch, enc width]
  std::vector<BlockWeights> encoder;
  t_vec_um encoder_norm;   // [enc width]
  t_mat_um projector_in;   // [enc width, llm width]
  t_mat_um projector_out;  // [llm width, llm width]
  t_mat_um token_embed;    // [vocab, llm width]
  std::vector<BlockWeights> llm;
  t_vec_um final_norm;  // [llm width]
  t_mat_um lm_head;     // [llm width, vocab]
};

// Activations of one transformer block (what backward needs); under recomputation the forward keeps
// only some of them (Recompute), and the backward fills in the rest.
struct BlockActivations {
  t_mat x_in, norm1, qkv, attn, lse, x_mid, norm2, mlp_pre, mlp_act;
  t_mat kv_full;  // context parallelism: the group's gathered K|V rows (empty otherwise)
  t_vec rstd1, rstd2;
};

struct EncoderActivations {
  std::vector<BlockActivations> blocks;
  t_mat x_final, normed, proj_pre, proj_act;
  t_vec rstd;
  t_mat embeddings;  // [patches, llm width]: the encoder's output
};

// One micro-batch's activations on this rank's pipeline stage, from its forward to its backward
// (Model::llm_stage_forward; ordinary allocations, as several micro-batches are in flight at once).
struct LlmStageActivations {
  std::vector<BlockActivations> blocks;
  t_mat x_out;            // the stage's output: the next stage's input; the last stage: the final norm's
  t_vec rstd;             // the last stage: the final norm's
  t_mat d_normed;         // the last stage: the loss's gradient at the final norm's output
  double loss_sum = 0.0;  // the last stage: the sum of the micro-batch's per-target losses
};

// A linear layer's weight [in, out]. Over `rows` rows, forward is Y = X W (GEMM rows x out x in), backward
// dX = dY W^T (rows x in x out) and dW = X^T dY (in x out x rows): 6 rows in out FLOPs in all.
struct LinearShape {
  int in = 0, out = 0;
};

// One transformer block's linear layers in the order it runs them: QKV, attention output, MLP in, MLP out.
std::vector<LinearShape> block_linear_shapes(int width, int hidden);
// The LLM's linear layers, one entry per weight, in the order Model runs them forward: per block QKV,
// attention output, MLP in, MLP out; then the LM head. The FLOP counts below are built from it.
std::vector<LinearShape> llm_linear_shapes(const LlmConfig& llm);

// Where a named tensor lives in the parameter (and gradient) buffer.
struct TensorRange {
  std::string name;  // e.g. "llm.1.qkv", "patch_embed"
  std::size_t offset, count;
  // Ranks of this rank's LLM tensor-parallel group holding these same elements: 1 for a slice of an LLM
  // weight, tp for a weight every rank holds whole (norms, the patch embedding), tp / encoder_tp for a
  // slice of an encoder weight. The group's sum over tensors of (sum of squares) / replicas counts each
  // element once (gradient_norm).
  int replicas = 1;
  // This rank's slice of the whole tensor (a vector: one row): element i of the range is the whole
  // tensor's (rows.global(i / cols.local()), cols.global(i % cols.local())).
  AxisSlice rows, cols;
};

// The whole tensor's flat (row-major) index of element i of this rank's range of it.
inline std::size_t whole_tensor_index(const TensorRange& t, std::size_t i) {
  const auto local_cols = static_cast<std::size_t>(t.cols.local());
  return static_cast<std::size_t>(t.rows.global(static_cast<int>(i / local_cols))) *
             static_cast<std::size_t>(t.cols.full) +
         static_cast<std::size_t>(t.cols.global(static_cast<int>(i % local_cols)));
}

// The gradients one step of a backward pass finishes together: the LLM's head (LM head and final norm),
// each LLM block, the token embedding; the encoder's head (projectors and final norm), each encoder block,
// the patch embedding. Model::gradient_units() lists them in the order a step's backward finishes them.
struct GradientUnit {
  std::string name;  // "llm.head", "llm.3", "token_embed", "encoder.head", "encoder.0", "patch_embed"
  std::vector<TensorRange> tensors;
};

// What a backward pass tells as it goes (gradient_sync.hpp starts each bucket's all-reduce from it):
// gradients_ready(u) once the pass has written its last contribution to unit u. Kept apart from the
// model's arithmetic: the listener is the caller's (no communication in the model).
class GradientListener {
 public:
  virtual ~GradientListener() = default;
  virtual void gradients_ready(int unit) = 0;  // an index into Model::gradient_units()
  // Called between the larger kernels of a block's backward (GEMMs, attention): cheap, for a listener
  // whose communication in flight needs the host's attention to progress.
  virtual void progress() {}
};

// Parameters of a model of this configuration (what Model's constructor allocates, twice: parameters and
// gradients), computed without allocating anything: the whole model's, or one rank's under `sharding`.
std::size_t parameter_count(const ModelConfig& config);
std::size_t parameter_count(const ModelConfig& config, const ModelSharding& sharding);
// Model::tensor_ranges of a rank with this sharding (only the ranks and sizes are read), without a model.
std::vector<TensorRange> tensor_ranges(const ModelConfig& config, const ModelSharding& sharding);

// The memory accounting of Model (its members below call these), without allocating a model:
// bytes of activations and backward workspace for a micro-batch of llm_rows local rows, key_rows key rows
// of other members (context parallelism by `cp_comm`; 0 without: all_gather, the group's rows, every block
// keeping them; p2p, the largest member's rows, a ring's blocks in flight during one block's attention;
// a2a, the largest member's rows, as many floats as the head shard of the group's rows each block keeps)
// and `patches` encoder rows, the blocks keeping what `recompute` says; the LLM pass's share of that; the
// bf16 GEMMs' rounded operands.
double activation_bytes(const ModelConfig& config, GemmPrecision precision, Recompute recompute,
                        std::int64_t llm_rows, std::int64_t patches, std::int64_t key_rows = 0,
                        CpComm cp_comm = CpComm::p2p);
double llm_pass_bytes(const ModelConfig& config, GemmPrecision precision, Recompute recompute,
                      std::int64_t llm_rows, std::int64_t key_rows = 0, CpComm cp_comm = CpComm::p2p);
double rounded_operand_bytes(const ModelConfig& config, GemmPrecision precision, std::int64_t rows, bool llm);
// The planners' memory model (layout/memory_model.hpp) from that accounting: the training state
// (training_state_bytes: 16 bytes per parameter replicated, less with AdamW's moments over
// optimizer_shards ranks), and the per-row, per-key-row and per-patch coefficients of activation_bytes
// under `recompute`.
MemoryModel memory_model(const ModelConfig& config, GemmPrecision precision,
                         Recompute recompute = Recompute::none, int optimizer_shards = 1,
                         CpComm cp_comm = CpComm::p2p);

class Model {
 public:
  // precision: of every GEMM (runtime.precision); attention, norms and the rest are fp32 either way.
  // recompute: what the forward keeps for the backward (runtime.recompute); the losses and gradients are
  // bitwise the same in every mode.
  // sharding: tensor parallelism of the encoder and of the LLM (parallel/tensor_parallel.hpp); this rank then
  // holds its slices only, each element initialised as the whole model's (so every layout starts from the
  // same model), and every pass runs the group's collectives. The groups must outlive the model.
  // cp_comm: the context-parallel mechanism of its LLM passes (parallel.cp_comm), for its memory accounting.
  Model(const ModelConfig& config, std::uint64_t seed, GemmPrecision precision = GemmPrecision::fp32,
        Recompute recompute = Recompute::none, const ModelSharding& sharding = {},
        CpComm cp_comm = CpComm::p2p);

  const ModelConfig& config() const { return config_; }
  GemmPrecision precision() const { return precision_; }
  Recompute recompute() const { return recompute_; }
  CpComm cp_comm() const { return cp_comm_; }
  const ModelSharding& sharding() const { return sharding_; }
  // This rank's LLM attention heads (heads / tp) and their dimension.
  AttentionShape attention_shape() const {
    return {config_.llm.heads / sharding_.llm.size, config_.llm.width / config_.llm.heads};
  }
  std::size_t parameter_count() const { return params_.extent(0); }  // this rank's
  // Parameters [0, decayed_count()) are matrices (weight decay applies), the rest norm weights.
  std::size_t decayed_count() const { return decayed_count_; }
  const t_vec& params() const { return params_; }
  const t_vec& grads() const { return grads_; }
  const std::vector<TensorRange>& tensor_ranges() const { return tensor_ranges_; }
  // Every tensor in exactly one unit; the LLM's units first (llm_gradient_units() of them, the order of
  // llm_forward_backward's backward), then the encoder's (encoder_backward's order).
  const std::vector<GradientUnit>& gradient_units() const { return gradient_units_; }
  int llm_gradient_units() const { return llm_units_; }
  const ModelTensors& weights() const { return weights_; }
  const ModelTensors& weight_grads() const { return weight_grads_; }
  void zero_grads();

  // Encoder forward over packed images; acts.embeddings holds the image embeddings at LLM width.
  void encoder_forward(const EncoderInput& input, EncoderActivations& acts) const;
  // Accumulates parameter gradients from d_embeddings [patches, llm width]. ready: told of each encoder
  // unit as its gradients are done (every one, also when there are no patches).
  void encoder_backward(const EncoderInput& input, const EncoderActivations& acts, const t_mat& d_embeddings,
                        GradientListener* ready = nullptr);

  // LLM forward and backward over this rank's packed rows, image embeddings spliced in from `received`
  // (rows named by input.image_src_rows). Loss gradients are scaled by grad_scale (1 / loss targets of
  // the global batch). Returns the sum of the per-target losses; writes the gradient of the received
  // rows it used into d_received. kv: the group's K/V exchange under context parallelism, else null
  // (then keys are the local rows). With kv, ranks holding no rows still take part in every exchange.
  // ready: told of each LLM unit as its gradients are done (every one, also when there are no rows).
  double llm_forward_backward(const LlmInput& input, const t_mat_const& received, float grad_scale,
                              const t_mat& d_received, ContextAttention* kv = nullptr,
                              GradientListener* ready = nullptr);

  // Pipeline parallelism (sharding().pipeline.stages > 1): a micro-batch's passes through this rank's
  // stage, apart, so that a schedule can run other micro-batches between them (step/pipeline_schedule.hpp).
  // Forward from x_in (the previous stage's x_out [rows, width]; the first stage: the embeddings and
  // `received`, as llm_forward_backward) into acts; the last stage also computes the loss and its gradient
  // (grad_scale as llm_forward_backward). kv as llm_forward_backward, kept until the backward.
  void llm_stage_forward(const LlmInput& input, const t_mat_const& received, const t_mat_const& x_in,
                         float grad_scale, ContextAttention* kv, LlmStageActivations& acts);
  // Backward from d_out (the next stage's d_in; unused on the last stage) into d_in [rows, width] (the
  // previous stage's d_out; the first stage writes d_received instead), accumulating the stage's
  // parameter gradients; ready as llm_forward_backward, for this stage's units.
  void llm_stage_backward(const LlmInput& input, const LlmStageActivations& acts, const t_mat_const& d_out,
                          const t_mat& d_in, const t_mat& d_received, ContextAttention* kv,
                          GradientListener* ready = nullptr);

  // Analytic FLOPs of one forward+backward (GEMMs and attention; what MFU counts), this rank's share under
  // tensor parallelism (/ encoder_tp, / tp) and its stage's layers (and LM head) under pipeline parallelism.
  // The recomputed forward is not counted (as Megatron reports MFU): recomputation lowers MFU.
  double encoder_flops(const EncoderInput& enc) const;
  double llm_flops(const LlmInput& llm) const;
  // Bytes of activations and backward workspace for a micro-batch of llm_rows local rows, key_rows key
  // rows of other members (context parallelism, as the free function below; 0 without) and `patches` encoder
  // rows (memory estimate). Under pipeline parallelism: this rank's stage, with the micro-batches 1F1B keeps
  // in flight on it.
  double activation_bytes(std::int64_t llm_rows, std::int64_t patches, std::int64_t key_rows = 0) const;
  // The LLM pass's share of that (activations, backward scratch and bf16 rounded operands, from the
  // workspace).
  double llm_pass_bytes(std::int64_t llm_rows, std::int64_t key_rows = 0) const;
  // bf16 GEMMs' rounded copies of their operands (workspace scratch) in a pass over `rows` rows; 0 in fp32.
  double rounded_operand_bytes(std::int64_t rows, bool llm) const;
  // Sizes the workspace for the run's largest LLM pass before the first step, so that the arena never
  // grows (holding its old and new sizes at once) in the middle of training.
  void reserve_workspace(std::int64_t llm_rows, std::int64_t key_rows = 0);

 private:
  // The passes of this rank's stage (the whole LLM without pipeline parallelism) over a micro-batch with
  // rows or a K|V exchange, in the active workspace's scope. keep_beyond_scope: acts are ordinary
  // allocations (a pipeline's, outliving the scope), else the scope's (one pass, forward then backward).
  void stage_forward(const LlmInput& input, const t_mat_const& received, const t_mat_const& x_in,
                     float grad_scale, ContextAttention* kv, bool keep_beyond_scope,
                     LlmStageActivations& acts);
  void stage_backward(const LlmInput& input, const LlmStageActivations& acts, const t_mat_const& d_out,
                      const t_mat& d_in, const t_mat& d_received, ContextAttention* kv,
                      GradientListener* ready);
  // The LM head and the loss over the vocabulary split across the LLM's tensor-parallel group.
  void vocab_parallel_loss(const t_mat& normed, const t_ivec_const& targets, float grad_scale,
                           const t_vec& losses, const t_mat& d_normed);

  ModelConfig config_;
  GemmPrecision precision_ = GemmPrecision::fp32;
  Recompute recompute_ = Recompute::none;
  ModelSharding sharding_;
  CpComm cp_comm_ = CpComm::p2p;
  int first_vocab_id_ = 0;  // of this rank's slice of the token embedding and LM head
  int stage_layers_ = 0;    // this rank's LLM blocks (all of them without pipeline parallelism)
  int llm_units_ = 0;       // of gradient_units_, the LLM's (the first ones)
  std::size_t decayed_count_ = 0;
  t_vec params_, grads_;
  ModelTensors weights_, weight_grads_;
  std::vector<TensorRange> tensor_ranges_;
  std::vector<GradientUnit> gradient_units_;
  // Temporaries of each pass (LLM activations, backward scratch, kernels' own), reused from micro-batch
  // to micro-batch; not state: encoder_forward is const.
  mutable Workspace workspace_;
};

}  // namespace minimllm
