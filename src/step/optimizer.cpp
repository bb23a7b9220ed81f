#include "minimllm/step/optimizer.hpp"

#include <algorithm>

#include "minimllm/kernels/optimizer.hpp"

namespace minimllm {

AdamW::AdamW(const Model& model, const OptimizerConfig& config)
    : config_(config), m_("adamw::m", model.parameter_count()), v_("adamw::v", model.parameter_count()) {}

void AdamW::step(Model& model, int step) {
  const OptimizerConfig& o = config_;
  const float warmup = o.warmup_steps > 0 ? std::min(1.0f, (step + 1.0f) / o.warmup_steps) : 1.0f;
  const AdamWHyper hyper{o.lr * warmup, o.beta1, o.beta2, o.eps, o.weight_decay};
  // One pass over the whole buffer; norm weights (after decayed_count) are not decayed.
  adamw_update(model.params(), model.grads(), m_, v_, hyper, step + 1, model.decayed_count());
}

}  // namespace minimllm
