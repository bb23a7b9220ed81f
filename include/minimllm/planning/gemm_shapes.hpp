// The GEMM shapes a layout gives each rank, and what they cost against the FLOP count the cost model's
// compute terms start from (planning/gemm_rates.hpp for the rates).
//
// Per row of a module, forward and backward, every linear layer runs three GEMMs: forward (rows x out x
// in), data gradient (rows x in x out; not for the patch embedding, whose input is data) and weight
// gradient (in x out x rows). Tensor parallelism slices them as Megatron-LM does: QKV, the MLP's first
// layer and the encoder's projector input column-wise (out / tp), the attention output, the MLP's second
// layer and the projector output row-wise (in / tp), the LM head by the vocabulary (out / tp); the patch
// embedding is replicated on an encoder group's ranks. `rows` is the M of a call: a micro-batch's rows on a
// rank for the LLM (parallel.tokens_per_rank, else the deck's mean sample), the rows an encoder group
// encodes in one call for an encoder module: under parallel.encoder_schedule per_step the step's mean rows of
// that module over the world's encoder groups (the encoder runs once per step over every item its group
// holds); per_micro_batch one LLM micro-batch's (the module's share of the LLM's rows a call, over a data
// rank's tp / encoder_tp encoder groups), at most the step's.
#pragma once

#include <string>
#include <vector>

#include "minimllm/config/run_config.hpp"
#include "minimllm/layout/model_parallel.hpp"
#include "minimllm/planning/cost_model.hpp"
#include "minimllm/planning/gemm_rates.hpp"

namespace minimllm {

// A linear layer as one rank runs it: its (sliced) input and output widths, how many the module has.
struct RankLinear {
  double in = 0.0, out = 0.0;
  double count = 1.0;
  bool input_gradient = true;  // false: its input is data (no data gradient)
};

std::vector<RankLinear> llm_linears(const LlmConfig& llm, int tp);
std::vector<RankLinear> encoder_linears(const EncoderConfig& encoder, int llm_width, int tp);

// A linear's GEMMs over `rows` rows: forward (rows x out x in), weight gradient (in x out x rows) and,
// with input_gradient, data gradient (rows x in x out).
std::vector<GemmShape> linear_gemm_shapes(const RankLinear& linear, double rows);
// Seconds of the forward and backward GEMMs of `linears` over `rows` rows at `rates`.
double linear_seconds(const GemmRates& rates, const std::vector<RankLinear>& linears, double rows);

// rows: the M of one call per module (above).
struct GemmRows {
  double llm = 0.0;
  std::vector<double> encoders;  // per encoder module
};
GemmRows representative_gemm_rows(const RunConfig& config, const ModelParallel& grid, int ranks);

// What the shapes did to each compute term, for the banner and /run.
struct GemmShapeEffect {
  std::string source;  // GemmRates::describe()
  double llm_factor = 1.0;
  std::vector<double> encoder_factors;
  GemmRows rows;
};

// Rescales the GEMM part of the per-rank cost model's linear compute terms (its a1, before the unit cost
// model divides them among the tp ranks) by
//   factor = linear_seconds(rates, sliced shapes, rows) x tp / linear_seconds(reference, whole shapes, rows)
// where `reference` is what the terms were computed or measured at (the peak for the FLOP-based
// defaults; the same measured rates for a calibration's). The GEMM part of a term is its GEMM FLOPs'
// share (the LLM's attention core is not a GEMM here). Returns what it did.
GemmShapeEffect apply_gemm_shapes(CostModel& rank, const RunConfig& config, const ModelParallel& grid,
                                  int ranks, const GemmRates& rates, const GemmRates& reference);

}  // namespace minimllm
