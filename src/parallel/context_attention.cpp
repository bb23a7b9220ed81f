#include "minimllm/parallel/context_attention.hpp"

#include "minimllm/parallel/gathered_attention.hpp"
#include "minimllm/parallel/ring_attention.hpp"

namespace minimllm {

std::unique_ptr<ContextAttention> make_context_attention(CpComm mode, std::shared_ptr<Communicator> group,
                                                         const MicroBatchWork& mb, int attention_width) {
  if (mode == CpComm::all_gather)
    return std::make_unique<GatheredAttention>(std::move(group), mb, attention_width);
  return std::make_unique<RingAttention>(std::move(group), mb, attention_width);
}

}  // namespace minimllm
