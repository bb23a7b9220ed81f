// The fixed model-parallel grid around the planners' dynamic context/data-parallel regrouping (the 4-D
// layout, docs/PARALLELISM.md):
//   ranks = tp x pp x units   (Megatron-LM's order: tp innermost, inside a node; then the units the
//                              planners regroup into CP/DP groups; pp outermost, one rank set per stage)
// A unit is one model replica's tp x pp ranks. The planners plan over the units exactly as over ranks;
// their cost model of a unit is planning/unit_cost_model.hpp's.
#pragma once

#include <string>
#include <vector>

#include "minimllm/config/recompute.hpp"
#include "minimllm/config/run_config.hpp"

namespace minimllm {

struct ModelParallel {
  int tp = 1, pp = 1, encoder_tp = 1;
  std::vector<int> pp_layers;  // the LLM's layers of each stage (parallel.pp_layers); empty: an even split
  bool encoder_stage = false;
  bool distributed_optimizer = false;
  Recompute recompute = Recompute::none;
  std::string deck;  // the deck it was read from (model_parallel_of), named by the errors below
  // The unit's stages: the LLM's, and the encoder's own before them (parallel.encoder_stage).
  int unit_stages() const { return pp + (encoder_stage ? 1 : 0); }
  int ranks_per_unit() const { return tp * unit_stages(); }
  bool trivial() const {
    return tp == 1 && pp == 1 && encoder_tp == 1 && !encoder_stage && !distributed_optimizer &&
           recompute == Recompute::none;
  }
};

ModelParallel model_parallel_of(const RunConfig& config);

// Layers of each of `stages` stages: `listed` (parallel.pp_layers) when not empty, else an even split of
// `layers` (the later stages one more where it does not divide: the first stage also runs the encoder and
// the embedding). The caller has checked the list (config/run_config.cpp).
std::vector<int> stage_layer_counts(int layers, int stages, const std::vector<int>& listed);

// Throws InputError naming the key when the grid does not fit `ranks` ranks of `ranks_per_node` per node:
// tp divides the ranks per node (tensor parallelism stays on the intra-node link), tp x the unit's stages
// (pp, and the encoder's with encoder_stage) divides the ranks, encoder_tp divides tp (the encoder's
// groups lie inside a stage's tp ranks, on one node).
void validate_model_parallel(const ModelParallel& grid, int ranks, int ranks_per_node);

// Runs (minimllm run) have tensor, pipeline, data and context parallelism and the encoder as its own
// stage: an InputError naming the key when the deck asks for pipeline stages or an encoder stage under the
// disaggregated placement (`disaggregated`: policy disagg or parallel.placement: disaggregated), which
// places the encoder on ranks of its own already, or the encoder per micro-batch (`schedule`) with pipeline
// stages or the encoder's own stage, whose schedules run it once a step (simulate projects it on any grid).
void require_runnable_grid(const ModelParallel& grid, bool disaggregated = false,
                           EncoderSchedule schedule = EncoderSchedule::per_step);

}  // namespace minimllm
