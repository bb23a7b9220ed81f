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
    std::vector<int> item_rows;  // every item's, in sample order
    for (const SampleMeta& sample : planned.batch.samples)
      for (const EncoderItem& item : sample.items) item_rows.push_back(item.rows);
    const auto rows_of = [&](const std::vector<int>& items) {
      std::int64_t rows = 0;
      for (int item : items) rows += item_rows[item];
      return rows;
    };
    // The patches held at once: the step's, or with the encoder per micro-batch its largest stage's.
    std::int64_t patches = rows_of(work.items);
    if (!work.stages.empty() && planned.plan.placement == Placement::colocated) {
      patches = 0;
      for (const EncoderStageWork& stage : work.stages) patches = std::max(patches, rows_of(stage.items));
    }
    peak.patches = std::max(peak.patches, patches);
  }
  std::int64_t values[3] = {peak.llm_rows, peak.key_rows, peak.patches};
  MPI_Allreduce(MPI_IN_PLACE, values, 3, MPI_INT64_T, MPI_MAX, world);
  return {values[0], values[1], values[2]};
}

}  // namespace minimllm
