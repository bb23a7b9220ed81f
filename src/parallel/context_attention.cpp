#include "minimllm/parallel/context_attention.hpp"

#include "minimllm/parallel/gathered_attention.hpp"
#include "minimllm/parallel/ring_attention.hpp"
#include "minimllm/parallel/ulysses_attention.hpp"

namespace minimllm {

std::unique_ptr<ContextAttention> make_context_attention(CpComm mode, std::shared_ptr<Communicator> group,
                                                         const MicroBatchWork& mb, AttentionShape shape) {
  const int width = shape.heads * shape.head_dim;
  switch (cp_comm_for_group(mode, group->size(), shape.heads)) {
    case CpComm::all_gather:
      return std::make_unique<GatheredAttention>(std::move(group), mb, width);
    case CpComm::a2a:
      return std::make_unique<UlyssesAttention>(std::move(group), mb, shape);
    case CpComm::p2p:
      break;
  }
  return std::make_unique<RingAttention>(std::move(group), mb, width);
}

}  // namespace minimllm
