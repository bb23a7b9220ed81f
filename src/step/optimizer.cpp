#include "minimllm/step/optimizer.hpp"

#include <algorithm>
#include <utility>

#include "minimllm/kernels/optimizer.hpp"

namespace minimllm {

AdamW::AdamW(const Model& model, const OptimizerConfig& config)
    : config_(config), m_("adamw::m", model.parameter_count()), v_("adamw::v", model.parameter_count()) {}

void AdamW::step(Model& model, int step) {
  const OptimizerConfig& o = config_;
  const float warmup = o.warmup_steps > 0 ? std::min(1.0f, (step + 1.0f) / o.warmup_steps) : 1.0f;
  AdamWHyper hyper{o.lr * warmup, o.beta1, o.beta2, o.eps, o.weight_decay};
  const auto update = [&](std::pair<std::size_t, std::size_t> range) {
    adamw_update(Kokkos::subview(model.params(), range), Kokkos::subview(model.grads(), range),
                 Kokkos::subview(m_, range), Kokkos::subview(v_, range), hyper, step + 1);
  };
  update({std::size_t(0), model.decayed_count()});
  hyper.weight_decay = 0.0f;  // norm weights are not decayed
  update({model.decayed_count(), model.parameter_count()});
}

}  // namespace minimllm
