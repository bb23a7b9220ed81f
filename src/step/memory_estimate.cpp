#include "minimllm/step/memory_estimate.hpp"

#include <algorithm>

namespace minimllm {

PeakWork peak_work(const std::vector<PlannedStep>& steps, CpComm cp_comm, MPI_Comm world) {
  PeakWork peak;
  for (const PlannedStep& planned : steps) {
    const RankWork& work = planned.work;
    for (const MicroBatchWork& mb : work.micro_batches) {
      std::int64_t rows = 0;
      for (const SequenceChunk& c : mb.chunks) rows += c.end - c.begin;
      peak.llm_rows = std::max(peak.llm_rows, rows);
      // The other members' key rows: the micro-batch's (gathered) or the largest member's (a ring block;
      // a2a's head shard of the group's rows, as many floats at most).
      if (work.group_ranks.size() > 1)
        peak.key_rows = std::max<std::int64_t>(
            peak.key_rows, cp_comm == CpComm::all_gather
                               ? mb.sample_offsets.back()
                               : *std::max_element(mb.member_rows.begin(), mb.member_rows.end()));
    }
    const GlobalBatch& batch = planned.batch;
    std::int64_t patches = 0;
    const std::vector<int> first_item = first_item_of_samples(batch);
    for (size_t s = 0; s < batch.samples.size(); ++s)
      for (size_t i = 0; i < batch.samples[s].items.size(); ++i)
        if (std::binary_search(work.items.begin(), work.items.end(), first_item[s] + static_cast<int>(i)))
          patches += batch.samples[s].items[i].rows;
    peak.patches = std::max(peak.patches, patches);
  }
  std::int64_t values[3] = {peak.llm_rows, peak.key_rows, peak.patches};
  MPI_Allreduce(MPI_IN_PLACE, values, 3, MPI_INT64_T, MPI_MAX, world);
  return {values[0], values[1], values[2]};
}

}  // namespace minimllm
