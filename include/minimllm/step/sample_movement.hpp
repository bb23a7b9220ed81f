// A step's raw inputs where its plan uses them. Each rank's loader holds a contiguous shard of the global
// batch (sample_loader_rank, layout/plan_prediction.hpp), as a distributed sampler gives each rank its share,
// and generates only its own samples' token ids and pixels; one all-to-all then moves each sample's token
// ids to every member of its LLM group and each image's pixels to its encoder rank. Those are the bytes
// plan_traffic() counts and movement_seconds() charges; the run pays them in its data phase, and
// /steps/movement_bytes records them. The packers (packing.hpp) read the inputs from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "minimllm/data/sampler.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/parallel/communicator.hpp"

namespace minimllm {

class SampleInputs {
 public:
  // `samples`' token ids and `images`' pixels (global image numbers) generated here: a rank alone (tests,
  // benchmarks, calibration's single-rank steps).
  static SampleInputs generate(const Sampler& sampler, const GlobalBatch& batch,
                               const std::vector<int>& samples, const std::vector<int>& images);

  // Collective over `world` (world ranks = plan ranks): this rank's loader shard generated and moved.
  static SampleInputs move(const Sampler& sampler, const GlobalBatch& batch, const StepPlan& plan,
                           Communicator& world);

  // Sample `sample`'s text_len token ids; throws std::logic_error when this rank does not hold them.
  std::vector<int> text_tokens(int sample) const;
  // Appends image `image`'s patches x patch_dim pixels to `out`; throws std::logic_error when not held.
  void append_pixels(int image, std::vector<float>& out) const;
  int patch_dim() const { return patch_dim_; }
  // Bytes this rank received from other ranks' loaders (0 when generated here or all local).
  std::int64_t received_bytes() const { return received_bytes_; }

 private:
  struct Span {
    std::size_t offset = 0, words = 0;  // in bytes_, 4-byte words (token ids or pixels)
  };
  int patch_dim_ = 0;
  std::vector<unsigned char> bytes_;
  std::unordered_map<int, Span> text_, pixels_;  // by sample / by global image number
  std::int64_t received_bytes_ = 0;
};

}  // namespace minimllm
