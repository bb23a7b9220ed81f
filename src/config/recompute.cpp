#include "minimllm/config/recompute.hpp"

#include <stdexcept>

namespace minimllm {

const char* to_string(Recompute mode) {
  switch (mode) {
    case Recompute::none:
      return "none";
    case Recompute::selective:
      return "selective";
    case Recompute::full:
      return "full";
  }
  return "?";
}

Recompute recompute_from_string(const std::string& name) {
  for (Recompute mode : {Recompute::none, Recompute::selective, Recompute::full})
    if (name == to_string(mode)) return mode;
  throw std::invalid_argument("recompute mode '" + name + "' is unknown; valid: none, selective, full");
}

}  // namespace minimllm
