// The cost model of a model-parallel grid's unit (layout/model_parallel.hpp), as the planners see it (issue
// 15's 4-D layout; `minimllm simulate`):
//   ranks = tp x pp x units   (Megatron-LM's order: tp innermost, inside a node; then the units the
//                              planners regroup into CP/DP groups; pp outermost, one rank set per stage)
// A unit is one model replica's tp x pp ranks. The planners plan over the units exactly as over ranks:
// every pipeline stage's rank set holds the same CP/DP groups, so a group of g units is g x tp ranks of
// each stage. unit_cost_model turns the per-rank cost model into the per-unit one:
//   compute     the LLM's work x the fullest stage's share of the layers (stage_layer_counts: even, or
//               parallel.pp_layers) / tp (the stages work concurrently on different micro-batches: the
//               fullest sets the pace); a sample's fixed overhead (launches) per stage, not shared by tp;
//               the encoder's work / tp (the stage holding it, the LLM's first or its own: its
//               tp / encoder_tp groups share a unit's items, as runs do), an item's fixed overhead on
//               its group; times the recomputed forward (runtime.recompute: full
//               repeats every block's forward, a third of its forward + backward FLOPs; selective the
//               attention core's, the quadratic term);
//   TP traffic  per LLM layer and token 4 all-reduces of a row (width x 4 bytes: forward after attention
//               and after the MLP, the same backward; 6 with full recomputation) on the tensor-parallel
//               all-reduce's link (CostModel::tp_allreduce: a calibration's measurement on tp ranks, else
//               the gradient all-reduce's intra-node link) among tp ranks, per stage; the encoder's among
//               encoder_tp ranks, per row;
//   CP traffic  each of a unit's ranks exchanges its heads' K|V (kv_row_bytes / tp) for its stage's
//               layers (the fullest stage's); the collectives of a unit's tp ranks run side by side, each on
//               its own link, so the links stay the per-rank ones; recomputation repeats the forward's
//               exchange where the mechanism needs it (CostModel::cp_recompute, recomputed_exchanges);
//   pipeline    the bubble: a group running m micro-batches through pp stages takes (m + pp - 1) / m
//               of its work (1F1B; CostModel::pipeline_stages, applied by predict); per token, a row's
//               activation forward and its gradient back (width x 4 bytes each) on the point-to-point
//               link between stages (CostModel::point_to_point: calibrated, or the collectives' per-step
//               link; between nodes once a stage's ranks fill a node), its latency twice per sample;
//   memory      per rank, of the fullest stage: its ceil(layers / pp) blocks and the embedding or the head
//               (both when pp = 1) / tp plus the encoder's / encoder_tp, 16 bytes each (fp32 parameters,
//               gradients, AdamW m and v) or, with the distributed optimizer, about 8 + 12 / units (the
//               moments and the reduce-scattered gradient sharded over the data-parallel domain the planners
//               regroup, training_state_bytes); activations per row and per key row / tp (sequence
//               parallelism; 1F1B's first stage holds pp micro-batches of layers / pp: one micro-batch of
//               every layer), per row / tp on average, plus one largest item's rows / encoder_tp
//               (data.images.max_side) where a unit has several encoder groups: an item is never split
//               between groups, so their shares can differ by one item;
//   step terms  the gradient all-reduce of a rank's parameters over the units (a reduce-scatter and an
//               all-gather with the distributed optimizer: the same time in the alpha-beta model), the
//               optimizer on a rank's parameters (/ units with the distributed optimizer).
// Not modelled: the vocabulary-parallel loss's small all-reduces, an uneven last stage beyond its
// parameters.
#pragma once

#include "minimllm/config/run_config.hpp"
#include "minimllm/layout/model_parallel.hpp"
#include "minimllm/planning/cost_model.hpp"

namespace minimllm {

// The cost model of a unit (above) from the per-rank one, whose memory model is the run's
// (memory_model() with the deck's recomputation) and whose compute is of one rank.
CostModel unit_cost_model(const CostModel& rank, const RunConfig& config, const ModelParallel& grid,
                          int ranks);

// Parameters one rank holds under the grid: its stage's LLM layers and embedding or head / tp, and the
// encoder / encoder_tp, of the most loaded stage.
double parameters_per_rank(const ModelConfig& model, const ModelParallel& grid);

}  // namespace minimllm
