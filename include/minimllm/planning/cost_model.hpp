// CostModel: predicted time of each sample's work per phase on a group of g ranks, collectives in the
// standard alpha-beta models (ring or tree, hierarchical over nodes), and memory per rank.
//   compute(s, g) = (a2 s^2 + a1 s + c) / g        s: tokens (LLM) or rows of one encoder item
//   comm(s, g)    = 0 for g = 1, else by the context-parallel mechanism (parallel.cp_comm), per layer:
//     all_gather: cp_layers x (all-gather + reduce-scatter of kv_row_bytes x s bytes over the group's
//                 span: collectives below)
//     p2p:        cp_layers x (forward: g - 1 ring steps, each a block B = kv_row_bytes x s / g sent to
//                 the next member; backward: g - 1 steps of K|V and dK|dV blocks, then the last dK|dV
//                 hop to its owner), each step's bytes exposed by 1 - cp_overlap (the share the block's
//                 attention hides), its latency always; the last hop wholly. Linear in s, as the
//                 planners need: a ring step's max(attention, transfer) is folded into cp_overlap.
//     a2a:        cp_layers x 4 all-to-alls (two a pass), each member sending (g - 1)/g of kv_row_bytes x
//                 s / g, not overlapped; a group whose size does not divide cp_heads: p2p
//                 (cp_comm_for_group).
//   Recomputation (cp_recompute) repeats the forward's exchange (recomputed_exchanges): full, in every
//   mechanism; selective, the ring's and a2a's output all-to-all.
// An encoder module attends within each item (an image's patches), so its cost is per item, with the
// coefficients of the item's module (a sample with several items costs the sum over its items); the LLM
// cost is per sample (one fused causal sequence).
// Per-step terms outside those phases (StepCost) complete a step's time: generating and packing each
// rank's inputs, the gradient all-reduce and the optimizer (predict_step, planning/step_prediction.hpp).
// Coefficients come from calibration on the machine (`minimllm calibrate`, planning/calibration.hpp) or from
// defaults derived from the model's FLOPs and a nominal rate; the network from the machine
// (config/machine_config.hpp, apply_machine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "minimllm/config/machine_config.hpp"
#include "minimllm/config/recompute.hpp"
#include "minimllm/config/run_config.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/layout/memory_model.hpp"

namespace minimllm {

struct PhaseCost {
  double a2 = 0.0, a1 = 0.0, c = 0.0;  // seconds per token^2, per token, per sample (encoder: per item)
  double operator()(double s) const { return (a2 * s + a1) * s + c; }
};

// One link class in the alpha-beta model.
struct LinkCost {
  double latency = 0.0;    // alpha: seconds per message step of a collective
  double bandwidth = 1e9;  // 1 / beta: bytes per second per rank, one direction
};

// ring: a collective on n ranks takes n - 1 message steps (all-reduce 2(n - 1)); tree: ceil(log2 n)
// (recursive doubling and halving; NCCL's trees for all-reduce); both with the same bandwidth terms.
enum class CollectiveAlgorithm { ring, tree };
CollectiveAlgorithm collective_algorithm_from_string(const std::string& name);  // "" = ring
const char* to_string(CollectiveAlgorithm algorithm);

// Collectives on one link class (Thakur, Rabenseifner and Gropp, "Optimization of collective
// communication operations in MPICH", IJHPCA 2005; bytes counted as nccl-tests' bus bytes):
//   steps(n)             = n - 1 (ring) or ceil(log2 n) (tree)
//   all-gather(n, S)     = steps(n) alpha + (n-1)/n S / bandwidth          S: the gathered buffer
//   reduce-scatter(n, S) = steps(n) alpha + (n-1)/n S / bandwidth          S: the buffer reduced
//   all-reduce(n, S)     = 2 steps(n) alpha + 2(n-1)/n S / bandwidth       S: the buffer
//   all-to-all(p, B)     = p alpha + B / bandwidth      pairwise exchange with p peers, B bytes sent
// All are 0 on one rank (and all-to-all with no peer).
double collective_steps(CollectiveAlgorithm algorithm, int n);
double all_gather_time(const LinkCost& link, CollectiveAlgorithm algorithm, int n, double bytes);
double reduce_scatter_time(const LinkCost& link, CollectiveAlgorithm algorithm, int n, double bytes);
double all_reduce_time(const LinkCost& link, CollectiveAlgorithm algorithm, int n, double bytes);
double all_to_all_time(const LinkCost& link, int peers, double bytes);

// A group of `ranks` ranks over the nodes: the nodes it touches and the most members on one of them.
struct GroupSpan {
  int ranks = 1, nodes = 1, per_node = 1;
};

// The two link classes and the algorithm. Collectives over a span are hierarchical: within one node the
// intra-node link alone, one rank per node the inter-node link alone; otherwise intra-node, then between
// the nodes (each local rank on its own rail, carrying 1/per_node of the data), then intra-node again:
//   all-gather     = AG_inter(nodes, S / per_node) + AG_intra(per_node, S)
//   reduce-scatter = RS_intra(per_node, S)         + RS_inter(nodes, S / per_node)
//   all-reduce     = RS_intra(per_node, S) + AR_inter(nodes, S / per_node) + AG_intra(per_node, S)
struct Network {
  LinkCost intra, inter;
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  double all_gather(const GroupSpan& span, double bytes) const;
  double reduce_scatter(const GroupSpan& span, double bytes) const;
  double all_reduce(const GroupSpan& span, double bytes) const;
};

// Per-step terms outside the encoder, boundary and LLM phases.
struct StepCost {
  // Generating and packing one rank's inputs: data_c + data_per_token * LLM rows + for each encoder item
  // it loads, its module's EncoderCost::data_per_item + data_per_row * rows.
  double data_c = 0.0, data_per_token = 0.0;
  double optimizer = 0.0;   // one AdamW step over every parameter (every rank, the same)
  double grad_bytes = 0.0;  // the gradient buffer, all-reduced over the world every step
  // The all-reduce's links (the machine's, or a calibration's all-reduce measurement).
  LinkCost allreduce_intra{5e-6, 10e9}, allreduce_inter{20e-6, 1e9};
  // A calibration's measurements of pipeline stages' point-to-point messages and of the tensor-parallel
  // groups' all-reduce (on tensor_parallel_ranks ranks, per message step); absent (latency and bandwidth
  // 0, tensor_parallel_ranks 0), the model uses the collectives' links (point_to_point(), tp_allreduce()).
  LinkCost point_to_point_intra{0.0, 0.0}, point_to_point_inter{0.0, 0.0};
  int tensor_parallel_ranks = 0;
  LinkCost tensor_parallel_allreduce{0.0, 0.0};
  // Creating one communicator on its members (MPI_Comm_create_group, or ncclCommInitRank with NCCL): a
  // step whose layout needs groups the pool does not hold pays it once (a step's groups are disjoint and
  // created concurrently). The machine's machine.comm_creation_ms, a calibration's measurement, or this
  // default: an assumption for MPI on one node (docs/INPUT.md, "machine").
  double comm_creation = 1e-4;
  // The forward's share of an item's encoder time (forward + backward), which decides when a
  // disaggregated pipeline's rows reach the LLM: 1/3 by FLOPs (a backward does twice a forward's GEMM
  // work), or what `minimllm calibrate` measured.
  double encoder_forward_share = 1.0 / 3.0;
};

// One encoder module's terms (ModelConfig::encoders; EncoderItem::module indexes them).
struct EncoderCost {
  PhaseCost compute;                 // one item of s rows on one rank
  double input_bytes_per_row = 0.0;  // its raw input as the loader holds it (fp32 pixels of a patch)
  double data_per_item = 0.0, data_per_row = 0.0;  // generating and packing it (StepCost)
};

struct CostModel {
  PhaseCost llm;                      // compute, on one rank
  std::vector<EncoderCost> encoders;  // one per encoder module
  LinkCost intra_node, inter_node;    // collectives within a node (NVLink domain) / between nodes
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  // Ranks per node of the links: the NVLink domain where it is larger than a node.
  int ranks_per_node = 1;
  // Context parallelism: every LLM layer exchanges K|V rows by cp_comm (comm(s, g) above); kv_row_bytes
  // per token and layer.
  double kv_row_bytes = 0.0;
  double cp_layers = 1.0;
  CpComm cp_comm = CpComm::p2p;  // parallel.cp_comm
  int cp_heads = 0;  // a2a: the LLM's heads per tensor-parallel rank (0: not given, every group shards)
  double cp_overlap = 0.0;  // p2p: share of a ring step's transfer hidden (machine.cp_overlap)
  Recompute cp_recompute = Recompute::none;  // runtime.recompute: the forward exchanges it repeats
  double boundary_bytes_per_row = 0.0;       // encoder output row forward + its gradient backward
  // A sample's raw inputs as its loader holds them: int32 token ids (plan_traffic.hpp); an item's,
  // EncoderCost::input_bytes_per_row.
  double input_bytes_per_token = 4.0;
  MemoryModel memory;
  double capacity_bytes = 0.0;         // memory per rank; 0: unlimited
  std::string capacity_source;         // where the capacity came from, for messages
  double encoder_reserve_bytes = 0.0;  // kept free of LLM rows for the encoder's activations
  StepCost step;                       // data, gradient all-reduce, optimizer
  // LLM pipeline stages (parallel.pp, layout/model_parallel.hpp): a group running m micro-batches takes
  // (m + pipeline_stages - 1) / m of its LLM work (the 1F1B bubble); 1: no pipeline.
  int pipeline_stages = 1;

  // Time of one sample of s tokens on a group of g ranks (g consecutive ranks starting at first_rank).
  double llm_time(double s, int g, int first_rank = 0) const;
  // The same for a group whose ranks do (spans = true) or do not span nodes.
  double llm_time_spanning(double s, int g, bool spans) const { return llm(s) / g + llm_comm(s, g, spans); }
  // Context-parallel communication of one sample on g ranks (0 for g = 1); linear in s for fixed (g,
  // spans).
  double llm_comm(double s, int g, bool spans) const;
  // One encoder item on one rank; the raw input bytes of one.
  double encoder_time(const EncoderItem& item) const { return encoders.at(item.module).compute(item.rows); }
  double input_bytes(const EncoderItem& item) const {
    return encoders.at(item.module).input_bytes_per_row * item.rows;
  }
  const LinkCost& link(bool spans) const { return spans ? inter_node : intra_node; }
  // One point-to-point message (pipeline stages): the calibration's measurement, else the collectives'
  // link per message step (a ring's step is one such message).
  const LinkCost& point_to_point(bool spans) const;
  // The all-reduce of a tensor-parallel group of n ranks inside a node, per message step: the
  // calibration's measurement on n ranks, else the gradient all-reduce's intra-node link.
  const LinkCost& tp_allreduce(int n) const;
  int node_of(int rank) const { return rank / ranks_per_node; }
  bool spans_nodes(int first_rank, int g) const;
  // The span of g consecutive ranks from first_rank; of g ranks placed as planners place them (from a
  // node boundary when larger than a node, else inside one unless `spans`: then across two).
  GroupSpan span_of(int first_rank, int g) const;
  GroupSpan packed_span(int g, bool spans) const;
  Network network() const { return {intra_node, inter_node, algorithm}; }
  // Gradient all-reduce over n ranks (0 for one rank): hierarchical on the step's all-reduce links.
  double grad_sync(int n) const;

  // Memory. Rows the fullest member of a group of g holds of a micro-batch of `tokens` tokens: two of 2g
  // near-equal chunks (rank_work.hpp, load_balanced_chunks), the micro-batch taken as one sequence (an
  // upper bound of any member's rows, up to rounding).
  double chunk_rows(double tokens, int g) const;
  // Bytes a member of a group of g ranks holds for a micro-batch: per_local_row x chunk_rows + per_token x
  // tokens, the key rows' bytes in the first term under p2p and a2a (the ring's blocks, a2a's head shard:
  // a member's rows), in the second under all_gather.
  double micro_batch_bytes(double tokens, int g) const;
  double per_local_row(int g) const;
  double per_token(int g) const;
  // Bytes per key row of a group of g under this run's mechanism as the group runs it (cp_comm_for_group).
  double key_row_bytes(int g) const;
  // Largest tokens a group of g ranks can hold in one micro-batch (memory less state, fixed and the
  // encoder reserve), or +inf without a capacity.
  double token_capacity(int g) const;
  bool bounded() const { return capacity_bytes > 0.0; }
};

// The share of a layer's forward exchange a group running `mode` repeats under `recompute`: 1 for full
// recomputation (the block's forward again); for selective, 1 under p2p (the ring recirculates K|V to
// recompute the attention core), 0.5 under a2a (the kept output's all-to-all back to its rows' owners, one
// of the forward's two), 0 under all_gather (the gathered K|V are kept).
double recomputed_exchanges(Recompute recompute, CpComm mode);

// The model's parameters by where a model-parallel grid puts them (layout/model_parallel.hpp).
struct ParameterSplit {
  double encoder = 0.0;    // every encoder module's: input embedding, blocks, final norm, projector
  double llm_block = 0.0;  // one LLM block
  double embedding = 0.0;  // the token embedding (the first pipeline stage)
  double head = 0.0;       // final norm and LM head (the last pipeline stage)
  int llm_layers = 0;
  double total() const { return encoder + llm_layers * llm_block + embedding + head; }
};
ParameterSplit parameter_split(const ModelConfig& model);

// Defaults from the model's analytic FLOPs at `gflops` per rank and a nominal network (10 GB/s and
// 5 us per step within a node, 1 GB/s and 20 us between nodes); calibration replaces them with measured
// ones, a machine section (apply_machine) with the machine's. Uncalibrated, the step terms hold only the
// gradient all-reduce on the nominal links (data and optimizer are not modelled: 0). No memory model and
// no capacity: the driver sets them (memory_model() in model/model.hpp).
CostModel default_cost_model(const RunConfig& config, double gflops, int ranks_per_node);

// The machine's links (both the collectives' and the gradient all-reduce's), its algorithm, its NVLink
// domain (the cost model's "node" for links), the ring's overlap and the precision K|V travel in (bf16
// halves kv_row_bytes; call once per cost model), where given.
void apply_machine(CostModel& cost, const MachineConfig& machine);

}  // namespace minimllm
