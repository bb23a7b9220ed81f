// The memory a rank holds, as plain data: what the model allocates (model/model.hpp computes it) and the
// planners bound their plans by (planning/memory_fit.hpp).
#pragma once

#include <cstddef>
#include <vector>

#include "minimllm/data/sampler.hpp"

namespace minimllm {

// What one rank holds (bytes), as the model allocates it (memory_model() in model/model.hpp computes it
// from the model's own accounting; the planners receive it as data):
//   state + fixed + per_encoder_row[module] x (rows of the encoder items it encodes in the step)
//         + per_row x (its rows of a micro-batch) + per_key_row x (key rows, g > 1 only: the micro-batch's
//           rows under all_gather, the largest member's under p2p and a2a; parallel.cp_comm)
struct MemoryModel {
  double state = 0.0;        // parameters, gradients and AdamW moments (training_state_bytes)
  double fixed = 0.0;        // activation-side bytes that do not grow with rows (bf16 rounded weights)
  double per_row = 0.0;      // per LLM row this rank holds in a micro-batch
  double per_key_row = 0.0;  // per key row of other members under context parallelism
  // a2a only: per key row of a group that runs the ring instead (a size not dividing the heads;
  // cp_comm_for_group), whose per_key_row is the larger of the two mechanisms'.
  double per_key_row_ring = 0.0;
  // p2p, a2a: the key rows are the largest member's rows (a ring's blocks; a2a's head shard of the
  // group's rows counts as many floats); all_gather (false): every row of the micro-batch.
  bool keys_per_member = true;
  // Per row of an item this rank encodes, one entry per encoder module (ModelConfig::encoders): held until
  // the module's backward.
  std::vector<double> per_encoder_row;
  // The encoder's own stage (parallel.encoder_stage, layout/model_parallel.hpp): a unit's encoder ranks are
  // not its LLM ranks, so a rank's peak is the larger of state + fixed + its micro-batch and state + fixed +
  // its items' rows, not their sum (state: the fuller stage's, an upper bound for the other).
  bool encoder_apart = false;
  // The encoder per micro-batch (parallel.encoder_schedule: per_micro_batch) in colocated plans: a rank
  // holds one stage's items' rows at a time, the most of any stage, not the step's.
  bool encoder_per_stage = false;

  // Bytes per row of a module's items (0 for a module without a term: a model that leaves the encoder out),
  // and those an encoder rank holds for one item until its backward.
  double encoder_row_bytes(int module) const {
    return module < static_cast<int>(per_encoder_row.size()) ? per_encoder_row[module] : 0.0;
  }
  double item_bytes(const EncoderItem& item) const { return encoder_row_bytes(item.module) * item.rows; }
  bool encoder_rows_cost_memory() const;  // some module's rows take memory
};

// Bytes per rank of a model's training state with AdamW's moments over `optimizer_shards` ranks (1:
// replicated; the distributed optimizer, model/parameter_shards.hpp): parameters and gradients whole
// (4 + 4 bytes each), the two moments of the largest balanced shard, ceil(parameters / shards) (8 bytes
// each), and with more than one shard the buffer its summed gradient is reduce-scattered into (4 bytes
// each).
double training_state_bytes(std::size_t parameters, int optimizer_shards);

}  // namespace minimllm
