#include "minimllm/driver/checkpoint.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <climits>
#include <cmath>
#include <ctime>
#include <exception>
#include <map>
#include <string>

#include "minimllm/config/input_error.hpp"
#include "minimllm/core/transfer.hpp"
#include "minimllm/driver/agreement.hpp"
#include "minimllm/driver/gemm_choice.hpp"
#include "minimllm/driver/provenance.hpp"
#include "minimllm/metrics/checkpoint_file.hpp"

#ifndef MINIMLLM_VERSION
#define MINIMLLM_VERSION "unknown"
#endif

namespace minimllm {
namespace {

std::vector<float> to_host(const t_vec& values) {
  const auto host = copy_to_host(values);
  return std::vector<float>(host.data(), host.data() + host.extent(0));
}

void from_host(const std::vector<float>& values, const t_vec& target) {
  const Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> host(values.data(),
                                                                                    values.size());
  transfer(target, host);
}

// The moments of every parameter on rank 0 (empty elsewhere; collective): a distributed optimizer's
// shards gathered, so that the file holds whole moments however the run was sharded.
std::vector<float> whole_moment(const t_vec& own, const AdamW& optimizer, const World& world) {
  if (!optimizer.distributed()) return world.is_root() ? to_host(own) : std::vector<float>();
  const std::vector<float> mine = to_host(own);
  std::vector<int> counts, displs;
  for (std::size_t r = 0; r < optimizer.shards().counts().size(); ++r) {
    counts.push_back(static_cast<int>(optimizer.shards().counts()[r]));
    displs.push_back(static_cast<int>(optimizer.shards().shard(static_cast<int>(r)).offset));
  }
  std::vector<float> whole(world.is_root() ? optimizer.shards().total() : 0);
  MPI_Gatherv(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, whole.data(), counts.data(),
              displs.data(), MPI_FLOAT, 0, world.comm);
  return whole;
}

// The optimizer's part (its shard) of a whole moment read from a checkpoint.
void restore_moment(const std::vector<float>& whole, const AdamW& optimizer, const t_vec& target) {
  const ShardRange shard = optimizer.shard();
  const Kokkos::View<const float*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> host(
      whole.data() + shard.offset, shard.count);
  transfer(target, host);
}

// The ranks of a unit (tp x its stages): the sharding of its rank u, u = stage x tp + tensor-parallel rank
// (world rank order, RankGrid; the encoder's own stage first), i.e. its slices' and stage's layout.
ModelSharding sharding_of(const ModelSharding& mine, int u, int llm_layers) {
  const int tp = mine.llm.size, t = u % tp;
  ModelSharding s;
  s.llm = {t, tp, nullptr};
  s.encoder = {t % mine.encoder.size, mine.encoder.size, nullptr};
  s.pipeline = unit_stage(llm_layers, u / tp, mine.pipeline.stages, mine.pipeline.encoder_stage,
                          mine.pipeline.stage_layers);
  return s;
}

// Where each tensor lies in the whole model's buffer, by name.
std::map<std::string, TensorRange> whole_tensors(const ModelConfig& config) {
  std::map<std::string, TensorRange> whole;
  for (const TensorRange& range : tensor_ranges(config, ModelSharding{})) whole.emplace(range.name, range);
  return whole;
}

bool sharded(const Model& model) {
  return model.sharding().llm.size > 1 || model.sharding().pipeline.unit_stages() > 1;
}

// The whole model's buffer (parameters or a moment) from the slices of the unit `unit` (MPI, the first
// unit's ranks in world order; `local`: this rank's buffer), on the unit's first rank, empty elsewhere.
std::vector<float> whole_from_slices(const std::vector<float>& local, const Model& model, MPI_Comm unit) {
  const ModelConfig& config = model.config();
  int ranks = 1, rank = 0;
  MPI_Comm_size(unit, &ranks);
  MPI_Comm_rank(unit, &rank);
  std::vector<std::vector<TensorRange>> ranges(ranks);  // of each rank's buffer
  std::vector<int> counts(ranks, 0), displs(ranks, 0);
  for (int u = 0; u < ranks; ++u) {
    ranges[u] = tensor_ranges(config, sharding_of(model.sharding(), u, config.llm.layers));
    for (const TensorRange& range : ranges[u]) counts[u] += static_cast<int>(range.count);
    if (u > 0) displs[u] = displs[u - 1] + counts[u - 1];
  }
  std::vector<float> slices(rank == 0 ? displs.back() + counts.back() : 0);
  MPI_Gatherv(local.data(), static_cast<int>(local.size()), MPI_FLOAT, slices.data(), counts.data(),
              displs.data(), MPI_FLOAT, 0, unit);
  if (rank != 0) return {};
  const std::map<std::string, TensorRange> whole_ranges = whole_tensors(config);
  std::vector<float> whole(parameter_count(config));
  for (int u = 0; u < ranks; ++u)
    for (const TensorRange& slice : ranges[u]) {
      const std::size_t base = whole_ranges.at(slice.name).offset;
      for (std::size_t i = 0; i < slice.count; ++i)
        whole[base + whole_tensor_index(slice, i)] = slices[displs[u] + slice.offset + i];
    }
  return whole;
}

// This rank's slices of a whole-model buffer (the inverse of whole_from_slices).
std::vector<float> slices_of(const std::vector<float>& whole, const Model& model) {
  const std::map<std::string, TensorRange> whole_ranges = whole_tensors(model.config());
  std::vector<float> local(model.parameter_count());
  for (const TensorRange& mine : model.tensor_ranges()) {
    const std::size_t base = whole_ranges.at(mine.name).offset;
    for (std::size_t i = 0; i < mine.count; ++i)
      local[mine.offset + i] = whole[base + whole_tensor_index(mine, i)];
  }
  return local;
}

void broadcast(std::string& text, MPI_Comm comm) {
  long long size = static_cast<long long>(text.size());
  MPI_Bcast(&size, 1, MPI_LONG_LONG, 0, comm);
  text.resize(static_cast<size_t>(size));
  MPI_Bcast(text.data(), static_cast<int>(size), MPI_CHAR, 0, comm);
}

void broadcast(std::vector<float>& values, MPI_Comm comm) {
  long long size = static_cast<long long>(values.size());
  MPI_Bcast(&size, 1, MPI_LONG_LONG, 0, comm);
  values.resize(static_cast<size_t>(size));
  MPI_Bcast(values.data(), static_cast<int>(size), MPI_FLOAT, 0, comm);
}

// Rank 0's reading of path, checked against this run.
RestartPoint read_and_check(const std::string& path, const RunConfig& config, std::size_t parameter_count) {
  const CheckpointContents c = read_checkpoint_file(path);
  const std::string deck_sha256 = sha256_hex(config.deck_text);
  if (c.text("deck_sha256", path) != deck_sha256)
    throw InputError(fmt::format(
        "{}: written by a run of another deck ({} sha256 {}); {} has sha256 {}: restart with the same deck",
        path, c.text("deck_path", path), c.text("deck_sha256", path).substr(0, 12), config.deck_path,
        deck_sha256.substr(0, 12)));
  const auto same = [&](const char* name, long long here, const char* key) {
    const long long there = c.integer(name, path);
    if (there != here)
      throw InputError(fmt::format("{}: written with {} = {}; this run has {}: restart with the same {}",
                                   path, key, there, here, key));
  };
  same("seed", static_cast<long long>(config.seed), "seed");
  same("global_batch", config.data.global_batch, "data.global_batch (--global-batch)");
  same("parameter_count", static_cast<long long>(parameter_count), "model (parameter count)");
  RestartPoint point;
  point.path = path;
  // Every field range-checked before use: a damaged or hand-made file is invalid input, never a wrapped
  // step count or an abort later.
  const long long next_step = c.integer("next_step", path);
  if (next_step < 0 || next_step > INT_MAX)
    throw InputError(
        fmt::format("{}: next_step = {} is outside [0, {}] (damaged file)", path, next_step, INT_MAX));
  if (next_step >= config.steps)
    throw InputError(
        fmt::format("{}: holds the state after {} steps; this run has {} steps (--steps): nothing "
                    "is left to run",
                    path, next_step, config.steps));
  point.next_step = static_cast<int>(next_step);
  const long long world_size = c.integer("world_size", path);
  if (world_size < 1 || world_size > INT_MAX)
    throw InputError(
        fmt::format("{}: world_size = {} is outside [1, {}] (damaged file)", path, world_size, INT_MAX));
  point.planning.gflops_per_rank = c.real("planning_gflops_per_rank", path);
  if (!std::isfinite(point.planning.gflops_per_rank) || point.planning.gflops_per_rank <= 0.0)
    throw InputError(
        fmt::format("{}: planning_gflops_per_rank = {} is not a finite positive rate (damaged file)", path,
                    point.planning.gflops_per_rank));
  point.planning.cost_model_source = c.text("cost_model_source", path);
  point.planning.calibration_text = c.text("calibration_text", path);
  // Checkpoints from before memory bound the plans have no capacity: their runs planned unbounded.
  const bool has_capacity = std::any_of(c.attributes.begin(), c.attributes.end(), [](const RunAttribute& a) {
    return a.name == "planning_capacity_bytes";
  });
  point.planning.capacity_bytes = has_capacity ? c.real("planning_capacity_bytes", path) : 0.0;
  if (!std::isfinite(point.planning.capacity_bytes) || point.planning.capacity_bytes < 0.0)
    throw InputError(fmt::format("{}: planning_capacity_bytes = {} is not finite and >= 0 (damaged file)",
                                 path, point.planning.capacity_bytes));
  const bool has_gemm = std::any_of(c.attributes.begin(), c.attributes.end(),
                                    [](const RunAttribute& a) { return a.name == "gemm_selection"; });
  point.planning.gemm_selection = has_gemm ? c.text("gemm_selection", path) : "";
  try {
    decode_gemm_selection(point.planning.gemm_selection, path);
  } catch (const std::invalid_argument& e) {
    throw InputError(fmt::format("{}: gemm_selection: {} (damaged file)", path, e.what()));
  }
  point.params = c.array("params", path);
  point.first_moment = c.array("adamw_m", path);
  point.second_moment = c.array("adamw_v", path);
  for (const auto* values : {&point.params, &point.first_moment, &point.second_moment})
    if (values->size() != parameter_count)
      throw InputError(fmt::format("{}: an array of {} values for a model of {} parameters (damaged file)",
                                   path, values->size(), parameter_count));
  return point;
}

}  // namespace

std::string default_checkpoint_path(const std::string& out) {
  const std::string suffix = ".h5";
  const bool h5 =
      out.size() >= suffix.size() && out.compare(out.size() - suffix.size(), suffix.size(), suffix) == 0;
  return (h5 ? out.substr(0, out.size() - suffix.size()) : out) + ".ckpt.h5";
}

void save_checkpoint(const std::string& path, const RunConfig& config, const World& world, const World& data,
                     const Model& model, const AdamW& optimizer, int next_step,
                     const PlanningBasis& planning) {
  // Every rank of a data world holds the same synchronised parameters (its first rank's are the run's)
  // and the moments, or with the distributed optimizer its shard of them (gathered to its first rank).
  // Under tensor and pipeline parallelism the first unit's ranks then gather their slices (their stages')
  // to rank 0, which assembles the whole model: the file is the same whatever the grid.
  if (parameter_count(config.model) > static_cast<std::size_t>(INT_MAX))
    throw std::runtime_error(fmt::format("{}: a model of {} parameters is too large to gather in one message",
                                         path, parameter_count(config.model)));
  std::vector<float> params = data.is_root() ? to_host(model.params()) : std::vector<float>();
  std::vector<float> first_moment = whole_moment(optimizer.first_moment(), optimizer, data);
  std::vector<float> second_moment = whole_moment(optimizer.second_moment(), optimizer, data);
  if (sharded(model)) {
    // The first unit's ranks, the data worlds' first ranks: the first tp ranks of every stage.
    const int tp = model.sharding().llm.size,
              stage_ranks = world.size / model.sharding().pipeline.unit_stages();
    MPI_Comm unit = MPI_COMM_NULL;
    MPI_Comm_split(world.comm, world.rank % stage_ranks < tp ? 0 : MPI_UNDEFINED, world.rank, &unit);
    if (unit != MPI_COMM_NULL) {
      params = whole_from_slices(params, model, unit);
      first_moment = whole_from_slices(first_moment, model, unit);
      second_moment = whole_from_slices(second_moment, model, unit);
      MPI_Comm_free(&unit);
    }
  }
  std::exception_ptr error;
  if (world.is_root()) {
    try {
      CheckpointContents c;
      c.attributes = {
          {"next_step", static_cast<long long>(next_step)},
          {"sampler_seed", static_cast<long long>(config.seed)},
          {"seed", static_cast<long long>(config.seed)},
          {"steps", static_cast<long long>(config.steps)},
          {"global_batch", static_cast<long long>(config.data.global_batch)},
          {"parameter_count", static_cast<long long>(parameter_count(config.model))},
          {"deck_name", config.name},
          {"deck_path", config.deck_path},
          {"deck_sha256", sha256_hex(config.deck_text)},
          {"policy", config.parallel.policy},
          {"world_size", static_cast<long long>(world.size)},
          {"planning_gflops_per_rank", planning.gflops_per_rank},
          {"cost_model_source", planning.cost_model_source},
          {"calibration_text", planning.calibration_text},
          {"planning_capacity_bytes", planning.capacity_bytes},
          {"gemm_selection", planning.gemm_selection},
          {"minimllm_version", std::string(MINIMLLM_VERSION)},
          {"written_utc", utc_now()},
      };
      c.arrays = {{"params", params}, {"adamw_m", first_moment}, {"adamw_v", second_moment}};
      write_checkpoint_file(path, c);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_on_error(world.comm, error);
}

RestartPoint read_restart_point(const std::string& path, const RunConfig& config, const World& world,
                                std::size_t parameter_count) {
  if (parameter_count > static_cast<std::size_t>(INT_MAX))
    throw std::runtime_error(fmt::format(
        "{}: a model of {} parameters is too large to broadcast in one message", path, parameter_count));
  RestartPoint point;
  std::exception_ptr error;
  if (world.is_root()) {
    try {
      point = read_and_check(path, config, parameter_count);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_on_error(world.comm, error);
  MPI_Bcast(&point.next_step, 1, MPI_INT, 0, world.comm);
  MPI_Bcast(&point.planning.gflops_per_rank, 1, MPI_DOUBLE, 0, world.comm);
  MPI_Bcast(&point.planning.capacity_bytes, 1, MPI_DOUBLE, 0, world.comm);
  broadcast(point.path, world.comm);
  broadcast(point.planning.cost_model_source, world.comm);
  broadcast(point.planning.calibration_text, world.comm);
  broadcast(point.planning.gemm_selection, world.comm);
  broadcast(point.params, world.comm);
  broadcast(point.first_moment, world.comm);
  broadcast(point.second_moment, world.comm);
  return point;
}

void restore_checkpoint(const RestartPoint& point, Model& model, const AdamW& optimizer) {
  const bool sliced = sharded(model);
  const auto own = [&](const std::vector<float>& whole) { return sliced ? slices_of(whole, model) : whole; };
  from_host(own(point.params), model.params());
  restore_moment(own(point.first_moment), optimizer, optimizer.first_moment());
  restore_moment(own(point.second_moment), optimizer, optimizer.second_moment());
  Kokkos::fence();
}

}  // namespace minimllm
