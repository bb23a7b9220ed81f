// RunConfig: everything a deck (inputs/*.yaml) sets, validated once; every size comes from here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "minimllm/config/input_error.hpp"
#include "minimllm/config/machine_config.hpp"

namespace minimllm {

// What an encoder module reads. Each sample's encoder items (data/sampler.hpp) name their module.
enum class Modality { vision };
const char* to_string(Modality modality);

struct EncoderConfig {
  Modality modality = Modality::vision;  // model.encoder: vision
  int width = 32;                        // model.encoder.width
  int heads = 2;                         // model.encoder.heads (width % heads == 0)
  int layers = 1;                        // model.encoder.layers (>= 0)
  int mlp_ratio = 4;                     // model.encoder.mlp_ratio
  int patch = 4;                         // model.encoder.patch: square patch side in pixels
  int channels = 3;                      // model.encoder.channels

  // Numbers one input row carries: an image patch's channels x patch x patch pixels.
  double input_width() const { return static_cast<double>(channels) * patch * patch; }
};

struct LlmConfig {
  int width = 64;     // model.llm.width
  int heads = 4;      // model.llm.heads (width % heads == 0)
  int layers = 2;     // model.llm.layers (>= 1)
  int mlp_ratio = 4;  // model.llm.mlp_ratio
  int vocab = 64;     // model.llm.vocab (>= 8)
};

struct ModelConfig {
  // The encoder modules, one per modality; EncoderItem::module indexes them. The deck's model.encoder is
  // the vision module, today the only one.
  std::vector<EncoderConfig> encoders{EncoderConfig{}};
  LlmConfig llm;
  float init_std = 0.02f;  // model.init_std

  // The index of the module of a modality in `encoders`; std::logic_error when the model has none.
  int module_of(Modality modality) const;
  // The vision module: what the image data generator and the model's vision encoder are sized by.
  const EncoderConfig& vision() const;
  EncoderConfig& vision();
};

// Text length distribution: lognormal with the given median and sigma, clamped to [min, max].
struct TextConfig {
  int median = 48;     // data.text.median
  double sigma = 0.8;  // data.text.sigma (>= 0; larger = longer tail)
  int min = 4;         // data.text.min (>= 2)
  int max = 256;       // data.text.max (>= min): the cap
};

// Images per sample ~ Poisson(mean) capped at max; side lengths drawn uniformly from
// {min_side, min_side + patch, ..., max_side}, each a multiple of the patch size.
struct ImageConfig {
  double mean_per_sample = 1.0;  // data.images.mean_per_sample (>= 0)
  int max_per_sample = 4;        // data.images.max_per_sample (>= 0; 0 = text only)
  int min_side = 8;              // data.images.min_side (multiple of model.encoder.patch)
  int max_side = 32;             // data.images.max_side (>= min_side, multiple of patch)
  int classes = 4;               // data.images.classes: hidden image classes the text depends on
};

struct DataConfig {
  int global_batch = 8;  // data.global_batch: samples per step over all ranks
  TextConfig text;
  ImageConfig images;
  // data.incoherence in [0, 1]: probability that a sample is extreme — half of those image-heavy
  // (max_per_sample images, min text), half text-heavy (no image, text drawn from the upper tail).
  double incoherence = 0.0;
  double noise = 0.1;  // data.noise in [0, 1): probability a text token ignores the hidden rule
};

struct OptimizerConfig {
  float lr = 3e-3f;           // optimizer.lr (> 0)
  float beta1 = 0.9f;         // optimizer.beta1 in [0, 1)
  float beta2 = 0.95f;        // optimizer.beta2 in [0, 1)
  float eps = 1e-8f;          // optimizer.eps (> 0)
  float weight_decay = 0.0f;  // optimizer.weight_decay (>= 0)
  int warmup_steps = 0;       // optimizer.warmup_steps (>= 0): linear warm-up of lr
};

struct RuntimeConfig {
  // (runtime.peak_gflops_per_rank is read into machine.peak_gflops: one value, MachineConfig.)
  int blas_threads = 1;  // runtime.blas_threads: BLAS threads per rank (>= 1)
  // runtime.precision: fp32 | bf16. bf16: every GEMM's inputs are rounded to bfloat16 (round to nearest
  // even), products accumulate in fp32 (tensor cores on CUDA); everything else stays fp32.
  std::string precision = "fp32";
  // runtime.recompute: none | selective | full, activation recomputation (Recompute in config/recompute.hpp):
  // what each transformer block's forward keeps for its backward; the losses are bitwise the same.
  std::string recompute = "none";
  // runtime.collectives: auto | mpi | nccl (choose_collectives in parallel/communicator.hpp).
  std::string collectives = "auto";
  // runtime.calibrate: measure the cost model at start-up (minimllm calibrate, quick settings) unless
  // parallel.cost_model names a calibration file.
  bool calibrate = false;
  // runtime.stall_timeout: seconds without progress (no phase change) after which the watchdog ends the
  // run (exit 1); 0 = automatic: max(300 s, 10 x the slowest step so far).
  double stall_timeout = 0.0;
  // runtime.plan_ahead: plan step t+1 on a helper thread while step t computes (FlexSP's overlap), so
  // that planning leaves the critical path; false: each step is planned when it begins.
  bool plan_ahead = true;
  // runtime.overlap_grad_sync: start each bucket's gradient all-reduce as soon as the backward has
  // finished its layers, so it runs while the remaining layers' backward computes (step/gradient_sync.hpp);
  // false: one all-reduce of every gradient after the backward. The losses are the same either way.
  bool overlap_grad_sync = true;
  // runtime.grad_bucket_mb: MiB of gradients per overlapped all-reduce (whole layers; >= 0, 0: one
  // bucket per layer).
  double grad_bucket_mb = 8.0;
  // runtime.gemm: auto | blas | portable. auto: at start-up BLAS and the portable kernel are timed at the
  // model's GEMM shape classes and each class runs on the faster (the same on every rank); blas, portable:
  // one backend for all. Under CUDA cuBLAS runs every GEMM whatever this says.
  std::string gemm = "auto";
};

// How a context-parallel group's attention reaches the other members' keys (parallel.cp_comm;
// parallel/context_attention.hpp): p2p, a ring overlapped with attention (Megatron-LM's default); a2a,
// DeepSpeed-Ulysses' all-to-alls from sequence-sharded to head-sharded rows and back; or all_gather, the
// group's K|V gathered before attention.
enum class CpComm { p2p, a2a, all_gather };
CpComm cp_comm_from_string(const std::string& name);  // throws std::invalid_argument naming the choices
const char* to_string(CpComm mode);
// The mechanism a group of `group_size` members runs under the run's `mode`: a2a shards the heads of a
// tensor-parallel rank (`heads_per_rank`) over the group, so a group whose size does not divide them runs
// p2p instead (the executor, the cost model and the memory model all follow this rule); the others as
// asked.
CpComm cp_comm_for_group(CpComm mode, int group_size, int heads_per_rank);

// When a colocated plan runs its encoders (parallel.encoder_schedule): per_step, once over all of the step's
// items before the LLM's micro-batches (heterogeneous parallelism's colocated schedule); per_micro_batch,
// each micro-batch's items right before its LLM pass and their backward right after it (Megatron-LM's
// homogeneous baseline: shorter encoder GEMMs, one micro-batch's encoder activations at a time).
// Disaggregated plans always run per micro-batch stage (their dataflow pipeline).
enum class EncoderSchedule { per_step, per_micro_batch };
EncoderSchedule encoder_schedule_from_string(const std::string& name);  // throws naming the choices

// How each step's work is laid out over the ranks (the deck's own plan; planners come later).
// Sizes that depend on the number of ranks are checked when the run starts (exit code 2 as well).
struct ParallelConfig {
  // parallel.policy: where each step's layout comes from: `deck` (the keys below) or a planner:
  // static | naive | megatron_dcp | orch | dhp | flexsp | disagg (docs/PARALLELISM.md). The command
  // line's --policy overrides it.
  std::string policy = "deck";
  // parallel.cp: static's (and naive's) context-parallel degree; it must divide the ranks, which then
  // form ranks / cp data-parallel replicas of cp consecutive ranks.
  int cp = 1;
  // parallel.tokens_per_rank: the per-rank token budget of static's packed bins (Megatron-LM's
  // max_seqlen_per_dp_cp_rank; a bin holds cp x budget tokens) and of megatron_dcp's groups; 0 = derived
  // each step: the longest sample's tokens / cp, rounded up.
  int tokens_per_rank = 0;
  // parallel.cp_comm: p2p | a2a | all_gather, the context-parallel mechanism of every group the planners
  // build (CpComm, cp_comm_for_group); the command line's --cp-comm overrides it.
  std::string cp_comm = "p2p";
  // (parallel.ranks_per_node is read into machine.ranks_per_node: one value, MachineConfig.)
  // parallel.flexsp_time_limit: seconds of wall time for flexsp's MILP (COIN-OR CBC) per step, solved on
  // rank 0 and broadcast; on time-out the best solution found (at worst the heuristic it starts from) is
  // used. 0: the heuristic only (deterministic, no solver).
  double flexsp_time_limit = 0.1;
  // parallel.group_sizes: LLM group sizes, any positive integers summing to the LLM ranks (all ranks,
  // or all but the encoder ranks when disaggregated); context parallel inside each group. Empty: one
  // rank per group (plain data parallel). Samples go to groups in order, in proportion to group size.
  std::vector<int> group_sizes;
  bool rotate_groups = false;             // parallel.rotate_groups: rotate sizes and ranks every step
  int micro_batches = 1;                  // parallel.micro_batches: per group, capped at its sample count
  std::string placement = "colocated";    // parallel.placement: colocated | disaggregated
  int encoder_ranks = 0;                  // parallel.encoder_ranks: disaggregated: the first N ranks encode
  std::string encoder_layout = "follow";  // parallel.encoder_layout: follow (a sample's images on its
                                          // group, round-robin) | round_robin (image i on rank i mod N)
  std::string encoder_schedule = "per_step";  // parallel.encoder_schedule: per_step | per_micro_batch
  int comm_pool_capacity = 64;                // parallel.comm_pool_capacity: most cached communicators
  // parallel.comm_precreate: none | powers_of_two, the pool's groups created at start-up
  // (layout/comm_ledger.hpp: power_of_two_blocks), for a planner policy.
  std::string comm_precreate = "powers_of_two";
  // The fixed model-parallel grid around the planners' regrouping (layout/model_parallel.hpp): tensor
  // parallelism of the LLM (parallel.tp; heads % tp == 0) and of the encoder (parallel.encoder_tp),
  // pipeline stages of the LLM (parallel.pp <= its layers; parallel.pp_layers: each stage's layers,
  // pp of them summing to the LLM's, empty: an even split), the encoder as its own stage before the LLM's
  // (parallel.encoder_stage: tp more ranks per unit).
  int tp = 1, pp = 1, encoder_tp = 1;
  std::vector<int> pp_layers;
  bool encoder_stage = false;
  // parallel.distributed_optimizer: ZeRO-1 over the world: AdamW's moments and the summed gradient sharded
  // (model/parameter_shards.hpp); the gradients reduce-scattered after the backward, the updated
  // parameters all-gathered (step/optimizer.hpp).
  bool distributed_optimizer = false;
  // parallel.cost_model: a calibration file (minimllm calibrate), relative to the deck's directory;
  // empty: the defaults from the model's FLOPs.
  std::string cost_model;
};

// benchmark: the deck is a reference problem; its run is checked against shipped output (docs/RUN_RULES.md).
struct BenchmarkConfig {
  std::string
      reference;  // benchmark.reference: reference file, relative to the deck's directory; empty: none
};

struct RunConfig {
  std::string name;           // name: short identifier used in output names
  std::string deck_path;      // where the deck was read from ("<embedded>" for built-ins)
  std::string deck_text;      // the deck's full text, stored in the HDF5 output
  std::uint64_t seed = 1234;  // seed
  int steps = 10;             // steps (>= 1)
  ModelConfig model;
  DataConfig data;
  OptimizerConfig optimizer;
  RuntimeConfig runtime;
  ParallelConfig parallel;
  BenchmarkConfig benchmark;
  // machine: the machine it runs on (or, for simulate, is projected to); runtime.peak_gflops_per_rank
  // and parallel.ranks_per_node are older names of machine.peak_gflops and machine.ranks_per_node.
  MachineConfig machine;
};

// Parses and validates a deck; throws InputError naming path, key, value and what is valid.
// Unknown keys are errors (a typo must not silently fall back to a default).
RunConfig load_run_config(const std::string& path);
RunConfig parse_run_config(const std::string& yaml_text, const std::string& origin);
// Checks the rules that involve more than one key (divisibility, size guards) again, after a
// command-line override changed a value (e.g. --global-batch); `origin` names where the values came from.
void check_run_config(const RunConfig& config, const std::string& origin);

// The shipped output of a reference problem (inputs/reference/<problem>.reference.yaml) and the tolerances
// a run is judged with (docs/RUN_RULES.md).
struct BenchmarkReference {
  std::string path;
  std::string problem;              // the deck's name it belongs to
  int step = 0;                     // reference step (0-based)
  double loss = 0.0;                // loss at that step
  double relative_tolerance = 0.0;  // |loss - reference| / reference must not exceed it
  // The same for a run whose GEMMs round to bfloat16 (runtime.precision: bf16); 0: such a run cannot be
  // judged against this reference.
  double bf16_relative_tolerance = 0.0;
  int invariance_steps = 1;                    // steps re-run under `static` for the layout-invariance check
  double invariance_relative_tolerance = 0.0;  // largest relative loss difference allowed there
  // Run rules (optional keys; the shipped references have both): the SHA-256 of the problem, the deck
  // without its `parallel:`, `runtime:` and `machine:` sections (problem_sha256, driver/benchmark.hpp),
  // and the least wall time of the timed steps.
  std::string problem_sha256;
  double min_timed_seconds = 0.0;
};
// Every key but problem_sha256 and min_timed_seconds is required; throws InputError naming path, key,
// value and what is valid.
BenchmarkReference load_benchmark_reference(const std::string& path);
// Check (a)'s tolerance for a run at runtime.precision `precision`: relative_tolerance (fp32) or
// bf16_relative_tolerance (bf16, 0 when the reference has none).
double loss_tolerance(const BenchmarkReference& ref, const std::string& precision);

}  // namespace minimllm
