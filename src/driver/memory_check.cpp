#include "minimllm/driver/memory_check.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "minimllm/config/input_error.hpp"
#include "minimllm/core/device.hpp"
#include "minimllm/model/model.hpp"

namespace minimllm {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}  // namespace

std::string MemoryBudget::source() const {
  if (given) return "machine.memory_gib";
  if (bytes < 0) return "";
  return fmt::format("detected: {} / {} rank{}",
                     device ? "free memory of the GPU" : "MemAvailable of the node", sharing,
                     sharing == 1 ? "" : "s");
}

MemoryBudget memory_budget(const World& world, const MachineConfig& machine) {
  MemoryBudget budget;
  if (machine.memory_gib > 0.0) {  // the same on every rank: nothing to detect or agree on
    budget.given = true;
    budget.bytes = budget.shared = budget.planning_bytes = machine.memory_gib * kGiB;
    return budget;
  }
  const AvailableMemory available = available_memory();
  budget.device = available.device;
  // Both collective: every rank calls both, whatever its backend.
  const int per_device = ranks_sharing_device(world.comm);
  const int per_node = ranks_per_node(world);
  budget.sharing = std::max(1, budget.device ? per_device : per_node);
  budget.shared = available.bytes;
  budget.bytes = available.bytes < 0 ? -1.0 : available.bytes / budget.sharing;
  // Plans must be identical on every rank: the least budget (unknown anywhere: unbounded).
  MPI_Allreduce(&budget.bytes, &budget.planning_bytes, 1, MPI_DOUBLE, MPI_MIN, world.comm);
  return budget;
}

std::string memory_shortfall(const RunConfig& config, int rank, const MemoryBudget& budget,
                             const MemoryNeed& need) {
  const double total = need.state_bytes + need.activation_bytes;
  if (budget.bytes < 0 || total <= budget.bytes) return "";
  const std::string available =
      budget.given ? fmt::format("rank {} has {:.2f} GiB (machine.memory_gib)", rank, budget.bytes / kGiB)
                   : fmt::format("rank {} has {:.2f} GiB ({} {:.2f} GiB divided among {} rank{})", rank,
                                 budget.bytes / kGiB,
                                 budget.device ? "free memory of its GPU" : "MemAvailable of its node",
                                 budget.shared / kGiB, budget.sharing, budget.sharing == 1 ? "" : "s");
  const double parameters =
      need.parameters > 0.0 ? need.parameters : static_cast<double>(parameter_count(config.model));
  const std::string model_keys =
      "model.llm.width/layers/vocab/mlp_ratio and model.encoder.width/layers/mlp_ratio";
  if (!need.planned || need.state_bytes >= budget.bytes)
    return fmt::format(
        "memory: the model's parameters, gradients and AdamW moments alone need {:.2f} GiB per rank "
        "({} parameters x {:.2f} bytes{}), but {}; they are sized by {}",
        need.state_bytes / kGiB, static_cast<long long>(parameters), need.state_bytes / parameters,
        config.parallel.distributed_optimizer ? ", the moments sharded" : "", available, model_keys);
  // Activations grow about linearly with the rows a rank holds, i.e. with the global batch.
  const double room = budget.bytes - need.state_bytes;
  const long long fits = static_cast<long long>(
      std::floor(config.data.global_batch * std::min(1.0, room / need.activation_bytes)));
  const std::string fit =
      fits >= 1 ? fmt::format("about data.global_batch = {} would fit at the current sample sizes", fits)
                : std::string("not even one sample per step fits: shorten data.text.max or the model");
  return fmt::format(
      "memory: the run needs {:.2f} GiB per rank ({:.2f} GiB parameters, gradients and AdamW moments + "
      "{:.2f} GiB activations and workspace for {} LLM rows per micro-batch and {} encoder patches per "
      "step), but {}; the activations are sized by data.global_batch = {}, data.text.median/max = {}/{}, "
      "data.images.max_per_sample/max_side = {}/{}{} and {}; {}",
      (need.state_bytes + need.activation_bytes) / kGiB, need.state_bytes / kGiB,
      need.activation_bytes / kGiB, need.peak.llm_rows, need.peak.patches, available,
      config.data.global_batch, config.data.text.median, config.data.text.max,
      config.data.images.max_per_sample, config.data.images.max_side,
      config.parallel.policy == "deck" ? ", parallel.micro_batches" : "", model_keys, fit);
}

void check_memory_fits(const RunConfig& config, const World& world, const MemoryBudget& budget,
                       const MemoryNeed& need) {
  const std::string mine = memory_shortfall(config, world.rank, budget, need);
  // The lowest failing rank (world.size when none fails) sends its line to every rank.
  int failing = mine.empty() ? world.size : world.rank;
  MPI_Allreduce(MPI_IN_PLACE, &failing, 1, MPI_INT, MPI_MIN, world.comm);
  if (failing == world.size) return;
  int length = static_cast<int>(mine.size());
  MPI_Bcast(&length, 1, MPI_INT, failing, world.comm);
  std::vector<char> line(mine.begin(), mine.end());
  line.resize(static_cast<std::size_t>(length));
  MPI_Bcast(line.data(), length, MPI_CHAR, failing, world.comm);
  throw InputError(std::string(line.begin(), line.end()));
}

}  // namespace minimllm
