#include "minimllm/planning/gemm_shapes.hpp"

#include <algorithm>

#include "minimllm/data/sampler.hpp"

namespace minimllm {
namespace {

// One transformer block's linears at tensor-parallel degree tp (QKV and MLP in: columns; attention output
// and MLP out: rows).
void append_block(std::vector<RankLinear>& out, double width, double hidden, double tp, double layers) {
  out.push_back({width, 3.0 * width / tp, layers});
  out.push_back({width / tp, width, layers});
  out.push_back({width, hidden / tp, layers});
  out.push_back({hidden / tp, width, layers});
}

// Of a linear term's FLOPs per row, the GEMMs' share: the LLM's also holds its attention core.
double llm_gemm_share(const LlmConfig& m) {
  const double w = m.width, h = static_cast<double>(m.mlp_ratio) * w;
  const double gemm = m.layers * 6.0 * (3.0 * w * w + w * w + 2.0 * w * h) + 6.0 * w * m.vocab;
  const double attention = 6.0 * w * m.layers;
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
  const double w = llm.width;
  append_block(out, w, static_cast<double>(llm.mlp_ratio) * w, tp, llm.layers);
  out.push_back({w, static_cast<double>(llm.vocab) / tp});  // the LM head, vocabulary-parallel
  return out;
}

std::vector<RankLinear> encoder_linears(const EncoderConfig& e, int llm_width, int tp) {
  std::vector<RankLinear> out;
  const double w = e.width;
  out.push_back({e.input_width(), w, 1.0, /*input_gradient=*/false});  // replicated on the group
  append_block(out, w, static_cast<double>(e.mlp_ratio) * w, tp, e.layers);
  out.push_back({w, static_cast<double>(llm_width) / tp});  // projector in (columns)
  out.push_back({static_cast<double>(llm_width) / tp, static_cast<double>(llm_width)});  // out (rows)
  return out;
}

double linear_seconds(const GemmRates& rates, const std::vector<RankLinear>& linears, double rows) {
  double seconds = 0.0;
  for (const RankLinear& l : linears) {
    double one = rates.seconds({rows, l.out, l.in}) + rates.seconds({l.in, l.out, rows});
    if (l.input_gradient) one += rates.seconds({rows, l.in, l.out});
    seconds += l.count * one;
  }
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
  for (double r : module_rows) rows.encoders.push_back(std::max(1.0, r / steps / groups));
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
