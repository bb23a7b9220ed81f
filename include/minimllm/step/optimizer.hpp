// AdamW over the model's one parameter buffer, owning its moment estimates (m, v): decoupled weight
// decay on the matrices, none on the norm weights, and a linear learning-rate warm-up (optimizer.*).
#pragma once

#include "minimllm/config/run_config.hpp"
#include "minimllm/core/types.hpp"
#include "minimllm/model/model.hpp"

namespace minimllm {

class AdamW {
 public:
  AdamW(const Model& model, const OptimizerConfig& config);

  // Updates model.params() from model.grads() (synchronised); step counts from 0.
  void step(Model& model, int step);

  double state_bytes() const { return 2.0 * sizeof(float) * m_.extent(0); }
  // The moment estimates, one per parameter: saved and restored by checkpoints (driver/checkpoint.hpp).
  const t_vec& first_moment() const { return m_; }
  const t_vec& second_moment() const { return v_; }

 private:
  OptimizerConfig config_;
  t_vec m_, v_;
};

}  // namespace minimllm
