#include "minimllm/planning/gemm_shapes.hpp"

#include <algorithm>

#include "minimllm/data/sampler.hpp"
#include "minimllm/model/model.hpp"

namespace minimllm {
namespace {

// One transformer block's linears (block_linear_shapes' order) at tensor-parallel degree tp: QKV and MLP in
// cut by columns, attention output and MLP out by rows.
void append_block(std::vector<RankLinear>& out, int width, int hidden, double tp, double layers) {
  const std::vector<LinearShape> shapes = block_linear_shapes(width, hidden);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const bool columns = i % 2 == 0;
    out.push_back(
        {columns ? shapes[i].in : shapes[i].in / tp, columns ? shapes[i].out / tp : shapes[i].out, layers});
  }
}

// Of a linear term's FLOPs per row, the GEMMs' share: the LLM's also holds its attention core (6 x width
// FLOPs per row and layer, cost_model.cpp).
double llm_gemm_share(const LlmConfig& m) {
  const double gemm = linear_seconds(GemmRates::at_peak(1e-9), llm_linears(m, 1), 1.0);  // FLOPs per row
  const double attention = 6.0 * m.width * m.layers;
  return gemm / (gemm + attention);
}

double shape_factor(const GemmRates& rates, const GemmRates& reference, const std::vector<RankLinear>& sliced,
                    const std::vector<RankLinear>& whole, int tp, double rows) {
  const double base = linear_seconds(reference, whole, rows);
  return base > 0.0 ? linear_seconds(rates, sliced, rows) * tp / base : 1.0;
}

}  // namespace

std::vector<RankLinear> llm_linears(const LlmConfig& llm, int tp) {
  std::vector<RankLinear> out;
  append_block(out, llm.width, llm.mlp_ratio * llm.width, tp, llm.layers);
  out.push_back(
      {static_cast<double>(llm.width), static_cast<double>(llm.vocab) / tp});  // vocabulary-parallel
  return out;
}

std::vector<RankLinear> encoder_linears(const EncoderConfig& e, int llm_width, int tp) {
  std::vector<RankLinear> out;
  const double w = e.width;
  out.push_back({e.input_width(), w, 1.0, /*input_gradient=*/false});  // replicated on the group
  append_block(out, e.width, e.mlp_ratio * e.width, tp, e.layers);
  out.push_back({w, static_cast<double>(llm_width) / tp});  // projector in (columns)
  out.push_back({static_cast<double>(llm_width) / tp, static_cast<double>(llm_width)});  // out (rows)
  return out;
}

std::vector<GemmShape> linear_gemm_shapes(const RankLinear& l, double rows) {
  std::vector<GemmShape> shapes = {{rows, l.out, l.in}, {l.in, l.out, rows}};  // forward, weight gradient
  if (l.input_gradient) shapes.push_back({rows, l.in, l.out});
  return shapes;
}

double linear_seconds(const GemmRates& rates, const std::vector<RankLinear>& linears, double rows) {
  double seconds = 0.0;
  for (const RankLinear& l : linears)
    for (const GemmShape& shape : linear_gemm_shapes(l, rows)) seconds += l.count * rates.seconds(shape);
  return seconds;
}

GemmRows representative_gemm_rows(const RunConfig& config, const ModelParallel& grid, int ranks) {
  const Sampler sampler(config);
  const int steps = std::max(1, std::min(config.steps, 4));
  double tokens = 0.0, samples = 0.0;
  std::vector<double> module_rows(config.model.encoders.size(), 0.0);
  for (int step = 0; step < steps; ++step)
    for (const SampleMeta& s : sampler.batch(step).samples) {
      tokens += s.tokens(), samples += 1.0;
      for (const EncoderItem& item : s.items) module_rows.at(item.module) += item.rows;
    }
  GemmRows rows;
  rows.llm =
      config.parallel.tokens_per_rank > 0 ? config.parallel.tokens_per_rank : tokens / std::max(samples, 1.0);
  // The world's encoder groups: tp / encoder_tp of them in each unit of tp x stages ranks.
  const double groups =
      std::max(1, ranks / grid.ranks_per_unit()) * static_cast<double>(grid.tp) / grid.encoder_tp;
  // Per micro-batch, a call covers the items of one LLM micro-batch (rows.llm rows on a data rank, of which
  // the module's share), over the data rank's tp / encoder_tp encoder groups.
  const bool per_micro_batch =
      encoder_schedule_from_string(config.parallel.encoder_schedule) == EncoderSchedule::per_micro_batch;
  for (double r : module_rows) {
    double call = r / steps / groups;
    if (per_micro_batch)
      call = std::min(call, rows.llm * (r / std::max(tokens, 1.0)) * grid.encoder_tp / grid.tp);
    rows.encoders.push_back(std::max(1.0, call));
  }
  rows.llm = std::max(1.0, rows.llm);
  return rows;
}

GemmShapeEffect apply_gemm_shapes(CostModel& rank, const RunConfig& config, const ModelParallel& grid,
                                  int ranks, const GemmRates& rates, const GemmRates& reference) {
  GemmShapeEffect effect;
  effect.source = rates.describe();
  effect.rows = representative_gemm_rows(config, grid, ranks);
  const ModelConfig& model = config.model;
  effect.llm_factor = shape_factor(rates, reference, llm_linears(model.llm, grid.tp),
                                   llm_linears(model.llm, 1), grid.tp, effect.rows.llm);
  const double share = llm_gemm_share(model.llm);
  rank.llm.a1 *= 1.0 + share * (effect.llm_factor - 1.0);
  for (size_t m = 0; m < rank.encoders.size(); ++m) {
    const EncoderConfig& e = model.encoders.at(m);
    const double factor =
        shape_factor(rates, reference, encoder_linears(e, model.llm.width, grid.encoder_tp),
                     encoder_linears(e, model.llm.width, 1), grid.encoder_tp, effect.rows.encoders.at(m));
    rank.encoders[m].compute.a1 *= factor;  // every FLOP of an encoder's linear term is a GEMM's
    effect.encoder_factors.push_back(factor);
  }
  return effect;
}

}  // namespace minimllm
