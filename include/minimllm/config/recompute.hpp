// runtime.recompute: what a transformer block's forward keeps for its backward (the rest is recomputed
// there, from what was kept, with the same operations on the same inputs: the same bits). none: every
// activation; selective: all but the attention core's outputs (attn, lse); full: only the block's input
// x_in. The model (model/model.hpp) runs it; the memory and cost models (layout/model_parallel.hpp) count it.
#pragma once

#include <string>

namespace minimllm {

enum class Recompute { none, selective, full };
const char* to_string(Recompute mode);
// "none", "selective" or "full" (as runtime.recompute writes them); throws std::invalid_argument otherwise.
Recompute recompute_from_string(const std::string& name);

}  // namespace minimllm
