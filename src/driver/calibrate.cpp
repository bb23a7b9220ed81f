#include "minimllm/driver/calibrate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <numeric>
#include <ostream>
#include <tuple>

#include "minimllm/config/input_error.hpp"
#include "minimllm/config/strict_yaml.hpp"
#include "minimllm/core/clock.hpp"
#include "minimllm/core/statistics.hpp"
#include "minimllm/data/sampler.hpp"
#include "minimllm/driver/agreement.hpp"
#include "minimllm/driver/memory_check.hpp"
#include "minimllm/kernels/gemm.hpp"
#include "minimllm/kernels/gemm_rate.hpp"
#include "minimllm/layout/model_parallel.hpp"
#include "minimllm/layout/step_plan.hpp"
#include "minimllm/model/model.hpp"
#include "minimllm/parallel/comm_pool.hpp"
#include "minimllm/planning/gemm_shapes.hpp"
#include "minimllm/step/optimizer.hpp"
#include "minimllm/step/run_step.hpp"

#ifndef MINIMLLM_VERSION
#define MINIMLLM_VERSION "unknown"
#endif

namespace minimllm {
namespace {

// k distinct integers spread over [lo, hi] (geometrically when asked), always including both ends.
std::vector<int> spread(int lo, int hi, int k, bool geometric) {
  std::vector<int> v;
  lo = std::max(1, lo), hi = std::max(lo, hi);
  for (int i = 0; i < k; ++i) {
    const double f = k > 1 ? static_cast<double>(i) / (k - 1) : 1.0;
    const double x = geometric ? lo * std::pow(static_cast<double>(hi) / lo, f) : lo + f * (hi - lo);
    v.push_back(static_cast<int>(std::lround(x)));
  }
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// n text-only samples of `tokens` tokens each (an LLM measurement).
GlobalBatch text_batch(int n, int tokens) {
  GlobalBatch b;
  for (int i = 0; i < n; ++i) {
    SampleMeta s;
    s.id = i, s.text_len = tokens;
    b.samples.push_back(s);
  }
  return b;
}

// n samples of one square image of side x side patches and `text` tokens after it (an encoder
// measurement: the LLM still runs on these short samples, but only the encoder's time is used).
GlobalBatch image_batch(int n, int side, int patch, int text) {
  GlobalBatch b;
  for (int i = 0; i < n; ++i) {
    SampleMeta s;
    s.id = i, s.text_len = text;
    EncoderItem im;
    im.height = im.width = side * patch;
    im.rows = side * side;
    im.text_pos = 0;
    s.items.push_back(im);
    b.samples.push_back(s);
  }
  return b;
}

// One measured call through the real step path on this rank alone.
struct Call {
  bool llm = true;  // LLM point (else encoder point)
  int size = 0;     // tokens per sample or patches per image
  int count = 0;    // samples or images in the call
  GlobalBatch batch;
  std::vector<double> llm_s, encoder_s, data_s;  // per timed pass
  std::vector<double> encoder_forward_s;         // of encoder_s, the forward
};

enum class Op { all_gather, all_reduce, all_to_all };

// Bytes each rank moves for a buffer of `bytes` per rank on n ranks (see CollectiveCalibration).
double bus_bytes(Op op, double bytes, int n) {
  switch (op) {
    case Op::all_gather:
      return (n - 1.0) * bytes;
    case Op::all_reduce:
      return 2.0 * (n - 1.0) / n * bytes;
    case Op::all_to_all:
      return (n - 1.0) / n * bytes;
  }
  return bytes;
}

// Fastest of the repetitions (each after a barrier) of one collective with `bytes` per rank, max over the
// ranks of comm. The fastest, not the median: on a machine shared with other work, a collective whose
// ranks are not all on a core at once waits for the scheduler (milliseconds, whatever the size), which
// says nothing about the link. MPI on host buffers, as the MPI communicators stage them.
double time_collective(Op op, std::size_t bytes, MPI_Comm comm, int repeats) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
  const int per_peer = static_cast<int>(std::max<std::size_t>(1, count / n));
  std::vector<float> send(std::max<std::size_t>(count, static_cast<std::size_t>(per_peer) * n), 1.0f);
  std::vector<float> recv(op == Op::all_gather ? count * n : send.size(), 0.0f);
  std::vector<double> times;
  for (int rep = -2; rep < repeats; ++rep) {  // two warm-ups
    MPI_Barrier(comm);
    const auto t0 = std::chrono::steady_clock::now();
    if (op == Op::all_gather)
      MPI_Allgather(send.data(), static_cast<int>(count), MPI_FLOAT, recv.data(), static_cast<int>(count),
                    MPI_FLOAT, comm);
    else if (op == Op::all_reduce)
      MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
    else
      MPI_Alltoall(send.data(), per_peer, MPI_FLOAT, recv.data(), per_peer, MPI_FLOAT, comm);
    if (rep >= 0)
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  double t = *std::min_element(times.begin(), times.end());
  MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, comm);
  return t;
}

// Fastest of the repetitions of one message of `bytes` between ranks 0 and 1 of `pair` (a two-rank
// communicator): half a ping-pong's round trip, rank 0's, shared with rank 1.
double time_message(std::size_t bytes, MPI_Comm pair, int repeats) {
  int rank = 0;
  MPI_Comm_rank(pair, &rank);
  const int count = static_cast<int>(std::max<std::size_t>(1, bytes / sizeof(float)));
  std::vector<float> buffer(static_cast<std::size_t>(count), 1.0f);
  std::vector<double> times;
  for (int rep = -2; rep < repeats; ++rep) {  // two warm-ups
    MPI_Barrier(pair);
    const auto t0 = std::chrono::steady_clock::now();
    if (rank == 0) {
      MPI_Send(buffer.data(), count, MPI_FLOAT, 1, 0, pair);
      MPI_Recv(buffer.data(), count, MPI_FLOAT, 1, 0, pair, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buffer.data(), count, MPI_FLOAT, 0, 0, pair, MPI_STATUS_IGNORE);
      MPI_Send(buffer.data(), count, MPI_FLOAT, 0, 0, pair);
    }
    if (rep >= 0)
      times.push_back(0.5 * std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  double t = *std::min_element(times.begin(), times.end());
  MPI_Bcast(&t, 1, MPI_DOUBLE, 0, pair);
  return t;
}

// Latency and bandwidth fitted over a few sizes (1 KiB to 4 MiB), each timed by `seconds(bytes, repeats)`
// and moving bus_bytes(bytes) per rank.
template <class Time, class BusBytes>
CollectiveCalibration fit_link(Time seconds, BusBytes bus_bytes_of) {
  CollectiveCalibration c;
  std::vector<std::vector<double>> rows;
  for (std::size_t bytes : {std::size_t(1) << 10, std::size_t(1) << 14, std::size_t(1) << 18,
                            std::size_t(1) << 20, std::size_t(1) << 22}) {
    const double t = seconds(bytes, bytes >= (1u << 20) ? 7 : 15);
    c.points.sizes.push_back(static_cast<double>(bytes));
    c.points.seconds.push_back(t);
    rows.push_back({1.0, bus_bytes_of(static_cast<double>(bytes))});
  }
  const LinearFit fit = fit_nonnegative(rows, c.points.seconds);
  c.measured = true;
  c.link.latency = fit.coefficients[0];
  c.link.bandwidth = fit.coefficients[1] > 0.0 ? 1.0 / fit.coefficients[1] : 1e15;  // not resolved: huge
  c.points.rms_relative_error = fit.rms_relative_error;
  c.points.max_relative_error = fit.max_relative_error;
  return c;
}

// Latency and bandwidth of one collective on comm (every member calls).
CollectiveCalibration measure_collective(Op op, MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  if (n < 2) return {};
  return fit_link([&](std::size_t bytes, int repeats) { return time_collective(op, bytes, comm, repeats); },
                  [&](double bytes) { return bus_bytes(op, bytes, n); });
}

// One message between the first two ranks of comm (every member calls; the others wait).
CollectiveCalibration measure_point_to_point(MPI_Comm comm) {
  int n = 1, rank = 0;
  MPI_Comm_size(comm, &n);
  MPI_Comm_rank(comm, &rank);
  CollectiveCalibration c;
  MPI_Comm pair = MPI_COMM_NULL;
  MPI_Comm_split(comm, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair);
  if (pair != MPI_COMM_NULL) {
    if (n >= 2)
      c = fit_link([&](std::size_t bytes, int repeats) { return time_message(bytes, pair, repeats); },
                   [](double bytes) { return bytes; });
    MPI_Comm_free(&pair);
  }
  return c;
}

// Every number of a CollectiveCalibration from `root` of comm to every rank of comm.
void broadcast(CollectiveCalibration& c, int root, MPI_Comm comm) {
  int measured = c.measured, points = static_cast<int>(c.points.sizes.size());
  MPI_Bcast(&measured, 1, MPI_INT, root, comm);
  MPI_Bcast(&points, 1, MPI_INT, root, comm);
  c.measured = measured != 0;
  c.points.sizes.resize(points), c.points.seconds.resize(points);
  double scalars[4] = {c.link.latency, c.link.bandwidth, c.points.rms_relative_error,
                       c.points.max_relative_error};
  MPI_Bcast(scalars, 4, MPI_DOUBLE, root, comm);
  c.link = {scalars[0], scalars[1]};
  c.points.rms_relative_error = scalars[2], c.points.max_relative_error = scalars[3];
  if (points > 0) {
    MPI_Bcast(c.points.sizes.data(), points, MPI_DOUBLE, root, comm);
    MPI_Bcast(c.points.seconds.data(), points, MPI_DOUBLE, root, comm);
  }
}

// Collectives within a node (on each node's ranks, all nodes at once; world rank 0's node reported) and
// across nodes (one rank per node), each "not measured" when there is only one rank to do it with; one
// message between two ranks of a node and between two nodes; the all-reduce of the deck's tensor-parallel
// groups (tp consecutive ranks, every group at once) when tp > 1 and divides the ranks of a node.
void measure_collectives(const World& world, int tp, Calibration& c) {
  MPI_Comm node;
  MPI_Comm_split_type(world.comm, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &node);
  int local = 0;
  MPI_Comm_rank(node, &local);
  c.all_gather = measure_collective(Op::all_gather, node);
  c.all_reduce = measure_collective(Op::all_reduce, node);
  c.all_to_all = measure_collective(Op::all_to_all, node);
  c.point_to_point = measure_point_to_point(node);
  MPI_Comm leaders;
  MPI_Comm_split(world.comm, local == 0 ? 0 : MPI_UNDEFINED, world.rank, &leaders);
  if (leaders != MPI_COMM_NULL) {
    c.inter_all_gather = measure_collective(Op::all_gather, leaders);
    c.inter_all_reduce = measure_collective(Op::all_reduce, leaders);
    c.inter_all_to_all = measure_collective(Op::all_to_all, leaders);
    c.inter_point_to_point = measure_point_to_point(leaders);
    MPI_Comm_free(&leaders);
  }
  int node_ranks = 1;
  MPI_Comm_size(node, &node_ranks);
  int divides =
      node_ranks % tp == 0 ? 1 : 0;  // on every node: blocks of tp consecutive ranks lie inside nodes
  MPI_Allreduce(MPI_IN_PLACE, &divides, 1, MPI_INT, MPI_MIN, world.comm);
  c.tensor_parallel_ranks = tp;
  if (tp > 1 && divides) {
    MPI_Comm group = MPI_COMM_NULL;
    MPI_Comm_split(world.comm, world.rank / tp, world.rank, &group);
    c.tensor_parallel_all_reduce = measure_collective(Op::all_reduce, group);
    MPI_Comm_free(&group);
  }
  MPI_Comm_free(&node);
  for (CollectiveCalibration* x :
       {&c.all_gather, &c.all_reduce, &c.all_to_all, &c.inter_all_gather, &c.inter_all_reduce,
        &c.inter_all_to_all, &c.point_to_point, &c.inter_point_to_point, &c.tensor_parallel_all_reduce})
    broadcast(*x, 0, world.comm);
}

// Creating a communicator as the pool does (MPI_Comm_create_group over a rank list, then freed): the
// median of a few creations over all ranks, the slowest rank's (the creation is collective).
double measure_comm_creation_seconds(const World& world) {
  MPI_Group all;
  MPI_Comm_group(world.comm, &all);
  constexpr int kRepeats = 9;
  std::vector<double> seconds;
  for (int i = 0; i < kRepeats; ++i) {
    MPI_Barrier(world.comm);
    const auto t0 = std::chrono::steady_clock::now();
    MPI_Comm comm;
    MPI_Comm_create_group(world.comm, all, i, &comm);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    MPI_Comm_free(&comm);
  }
  MPI_Group_free(&all);
  double slowest = median(seconds);
  MPI_Allreduce(MPI_IN_PLACE, &slowest, 1, MPI_DOUBLE, MPI_MAX, world.comm);
  return slowest;
}

// A call's activations (the model calibrate runs is unsharded, without recomputation) against the memory of
// a rank, before the calls' batches and workspaces are allocated: --rows too large for this machine is
// invalid input (exit 2 naming the flag), agreed over the ranks, not a failed allocation.
void check_rows_fit(const RunConfig& config, const World& world, int rows, int image_rows, bool from_flag) {
  const MemoryBudget budget = memory_budget(world, config.machine);  // collective
  const GemmPrecision precision = gemm_precision_from_string(config.runtime.precision);
  const double need = activation_bytes(config.model, precision, Recompute::none, rows, 0) +
                      activation_bytes(config.model, precision, Recompute::none, 0, image_rows);
  std::exception_ptr error;
  if (budget.bytes > 0.0 && need > budget.bytes) {
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    error = std::make_exception_ptr(InputError(fmt::format(
        "{}{} rows per call: a call's activations need {:.1f} GiB per rank, more than the {:.1f} GiB "
        "available ({}); give fewer rows",
        from_flag ? "--rows " : config.deck_path + ": ", rows, need / kGiB, budget.bytes / kGiB,
        budget.source())));
  }
  agree_on_error(world.comm, error);
}

// The share of a context-parallel ring's K|V transfers its attention hides (machine.cp_overlap; the p2p
// term of cost_model.hpp), on the first two ranks of world rank 0's node: one text sample of `tokens`
// tokens (the deck's longest) as a group of 2 through the real step, on the calibration's model (its
// context parallelism by the ring), its exchange time (posting and waiting, the slower rank's,
// median of `repeats` after a warm-up) against the same transfers unhidden on `link` (the measured
// point-to-point link). For g = 2 the cost model charges per layer 3 latencies and the last dK|dV hop
// always, and (1 - overlap) of three blocks (one forward, two backward): solved for the overlap, within
// [0, 1]. Not measured with fewer than two ranks on that node. Collective over the world.
struct RingOverlap {
  bool measured = false;
  double overlap = 0.0;
  double exposed = 0.0, unhidden = 0.0;  // seconds per layer: measured, and the transfers alone
};
RingOverlap measure_ring_overlap(const RunConfig& config, const World& world, Model& model,
                                 const LinkCost& link, int tokens, int repeats) {
  MPI_Comm node;
  MPI_Comm_split_type(world.comm, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &node);
  int local = 0, node_ranks = 1, first = world.rank;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &node_ranks);
  MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, node);
  MPI_Comm_free(&node);
  MPI_Bcast(&node_ranks, 1, MPI_INT, 0, world.comm);
  if (node_ranks < 2) return {};
  MPI_Comm pair;
  MPI_Comm_split(world.comm, first == 0 && local < 2 ? 0 : MPI_UNDEFINED, world.rank, &pair);
  double exposed = 0.0;
  std::exception_ptr error;
  if (pair != MPI_COMM_NULL) try {
      const World two = World::of(pair);
      const Sampler sampler(config);
      CommPool pool(pair, 4, create_mpi_communicator);
      StepExecutor executor(model);
      const GlobalBatch batch = text_batch(1, tokens);
      const PlannedStep planned = planned_step(batch, make_grouped_plan(batch, {2}), two.rank, two.size);
      std::vector<double> seconds;
      for (int rep = 0; rep <= repeats; ++rep) {
        MPI_Barrier(pair);
        const StepOutcome o = run_step(sampler, executor, pool, planned);
        double t = o.seconds[Phase::kv_exchange];
        MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, pair);
        if (rep > 0) seconds.push_back(t);  // the first warms up
      }
      exposed = median(seconds);
    } catch (...) {
      error = std::current_exception();
    }
  // Every rank learns of a failure here before going on (one inside the step may leave its partner in
  // the step's collectives, as in training, where the stall watchdog ends the run).
  if (pair != MPI_COMM_NULL) MPI_Comm_free(&pair);
  agree_on_error(world.comm, error);
  MPI_Bcast(&exposed, 1, MPI_DOUBLE, 0, world.comm);
  const double block = 2.0 * config.model.llm.width * sizeof(float) * (tokens / 2.0) / link.bandwidth;
  const double always = 3.0 * link.latency + block, hideable = 3.0 * block;
  const double per_layer = exposed / config.model.llm.layers;
  return {true, std::clamp(1.0 - (per_layer - always) / hideable, 0.0, 1.0), per_layer, always + hideable};
}

// The machine section a calibration writes (usable by simulate --machine): what these ranks can
// measure, and in the notes what was measured how and what could not be.
void measure_machine(const RunConfig& config, const World& world, Model& model, int longest, int repeats,
                     Calibration& c) {
  MachineConfig& m = c.machine;
  std::vector<std::string> measured, missing;
  m.ranks_per_node = c.ranks_per_node;
  measured.push_back(fmt::format("ranks_per_node ({}: ranks sharing a node, MPI)", m.ranks_per_node));
  const MemoryBudget budget = memory_budget(world, MachineConfig{});  // collective
  double least = budget.bytes;
  MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_DOUBLE, MPI_MIN, world.comm);
  if (least > 0.0) {
    m.memory_gib = least / (1024.0 * 1024.0 * 1024.0);
    measured.push_back(fmt::format("memory_gib ({}, least over ranks)", budget.source()));
  } else {
    missing.push_back("memory_gib (this machine's memory could not be read)");
  }
  const GemmPrecision precision = gemm_precision_from_string(config.runtime.precision);
  double rate = measure_gemm_gflops(precision);
  MPI_Allreduce(MPI_IN_PLACE, &rate, 1, MPI_DOUBLE, MPI_SUM, world.comm);
  m.peak_gflops = rate / world.size;
  measured.push_back(
      fmt::format("peak_gflops ({} GEMM 1024^3 ({}), mean over ranks: a GEMM rate, not a "
                  "datasheet peak)",
                  to_string(default_gemm_backend()), to_string(precision)));
  // The links per message step of a ring (cost_model.hpp), from the all-gather fits.
  const auto link = [&](const CollectiveCalibration& x, int ranks, LinkSpec& spec, const char* name,
                        const char* why_not) {
    if (!x.measured) {
      missing.push_back(fmt::format("{} ({})", name, why_not));
      return;
    }
    const LinkCost step = per_step(x.link, CollectiveAlgorithm::ring, ranks, 1);
    spec = {1e-9 * step.bandwidth, 1e6 * step.latency};
    measured.push_back(fmt::format("{} (MPI all-gather on {} ranks, 1 KiB-4 MiB per rank)", name, ranks));
  };
  link(c.all_gather, c.ranks_per_node, m.intra_node, "intra_node", "one rank per node");
  link(c.inter_all_gather, std::max(1, c.ranks / std::max(1, c.ranks_per_node)), m.inter_node, "inter_node",
       "one node");
  m.comm_creation_ms = std::max(1e-6, 1e3 * measure_comm_creation_seconds(world));
  measured.push_back(
      fmt::format("comm_creation_ms (MPI_Comm_create_group on {} ranks, median of 9)", world.size));
  const int ring_tokens = std::max(2, longest + longest % 2);  // even: two equal members
  const RingOverlap ring =
      c.point_to_point.measured
          ? measure_ring_overlap(config, world, model, c.point_to_point.link, ring_tokens, repeats)
          : RingOverlap{};
  if (ring.measured) {
    m.cp_overlap = ring.overlap;
    measured.push_back(fmt::format(
        "cp_overlap ({:.3f}: a context-parallel ring of 2 ranks of a node over one {}-token sample exposed "
        "{:.3f} ms of exchange a layer, against {:.3f} ms for the same transfers unhidden on the measured "
        "message link)",
        m.cp_overlap, ring_tokens, 1e3 * ring.exposed, 1e3 * ring.unhidden));
  } else {
    missing.push_back("cp_overlap (one rank per node: no ring to time)");
  }
  missing.push_back("nvlink_domain (not detectable: the node is taken as the domain)");
  c.machine_notes = {"measured: " + strict_yaml::join(measured),
                     "not measured: " + strict_yaml::join(missing)};
}

// The GEMM rates at the shapes the deck's layout gives a rank (planning/gemm_shapes.hpp): every linear at
// tp 1 and at parallel.tp (the encoders' at 1 and encoder_tp), at a quarter of and at the layout's rows per
// call, each the mean over ranks of every rank's best of `repeats` (all ranks measure at once, as they
// compute in a run). Forward-shaped calls (no transposes) stand for all three of a linear's GEMMs.
std::vector<GemmRatePoint> measure_gemm_rates(const RunConfig& config, const World& world, int repeats) {
  const ModelParallel grid = model_parallel_of(config);
  const ModelConfig& model = config.model;
  const GemmRows rows = representative_gemm_rows(config, grid, grid.ranks_per_unit() * world.size);
  std::vector<std::tuple<int, int, int>> shapes;
  const auto add = [&](const std::vector<RankLinear>& linears, double m) {
    for (double r : {std::max(1.0, m / 4.0), m})
      for (const RankLinear& l : linears)
        for (const GemmShape& g : linear_gemm_shapes(l, r))
          shapes.emplace_back(static_cast<int>(std::lround(g.m)), static_cast<int>(std::lround(g.n)),
                              static_cast<int>(std::lround(g.k)));
  };
  for (int tp : {1, grid.tp}) add(llm_linears(model.llm, tp), rows.llm);
  for (size_t m = 0; m < model.encoders.size(); ++m)
    for (int tp : {1, grid.encoder_tp})
      add(encoder_linears(model.encoders[m], model.llm.width, tp), rows.encoders[m]);
  std::sort(shapes.begin(), shapes.end());
  shapes.erase(std::unique(shapes.begin(), shapes.end()), shapes.end());
  const GemmPrecision precision = gemm_precision_from_string(config.runtime.precision);
  std::vector<double> gflops;
  for (const auto& [m, n, k] : shapes)
    gflops.push_back(measure_gemm_gflops(m, n, k, precision, default_gemm_backend(), repeats) / world.size);
  MPI_Allreduce(MPI_IN_PLACE, gflops.data(), static_cast<int>(gflops.size()), MPI_DOUBLE, MPI_SUM,
                world.comm);
  std::vector<GemmRatePoint> points;
  for (size_t i = 0; i < shapes.size(); ++i)
    points.push_back({std::get<0>(shapes[i]), std::get<1>(shapes[i]), std::get<2>(shapes[i]), gflops[i]});
  return points;
}

std::string utc_now() {
  char stamp[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return stamp;
}

}  // namespace

Calibration calibrate(const RunConfig& config, const World& world, const CalibrateOptions& options) {
  std::ostream* log = world.is_root() ? options.log : nullptr;
  set_blas_threads(config.runtime.blas_threads);
  const Sampler sampler(config);
  Model model(config.model, config.seed);
  CommPool pool(MPI_COMM_SELF, 4, create_mpi_communicator);
  StepExecutor executor(model);

  // The deck's sizes: sample lengths, image sides, and the rows and patches one rank handles per step.
  int min_tokens = 1 << 30, max_tokens = 1, min_side = 1 << 30, max_side = 1;
  double tokens = 0.0, patches = 0.0;
  const int steps = std::min(config.steps, 64);
  const int patch = config.model.vision().patch;
  for (int step = 0; step < steps; ++step) {
    const GlobalBatch batch = sampler.batch(step);
    tokens += static_cast<double>(batch.text_tokens() + batch.encoder_rows()) / steps;
    patches += static_cast<double>(batch.encoder_rows()) / steps;
    for (const SampleMeta& s : batch.samples) {
      min_tokens = std::min(min_tokens, s.tokens()), max_tokens = std::max(max_tokens, s.tokens());
      for (const EncoderItem& im : s.items) {
        const int side = std::max(im.height, im.width) / patch;
        min_side = std::min(min_side, side), max_side = std::max(max_side, side);
      }
    }
  }
  if (min_side > max_side)  // no image in the deck's batches: its configured range
    min_side = config.data.images.min_side / patch, max_side = config.data.images.max_side / patch;
  const int rows = options.rows_per_call > 0
                       ? options.rows_per_call
                       : std::max(max_tokens, static_cast<int>(std::lround(tokens / world.size)));
  const int image_rows =
      options.rows_per_call > 0
          ? options.rows_per_call
          : std::max(max_side * max_side, static_cast<int>(std::lround(patches / world.size)));
  check_rows_fit(config, world, rows, image_rows, options.rows_per_call > 0);

  // The calls: LLM sample lengths spread geometrically over the deck's range, image sides linearly (at
  // least three sizes each where the range allows, so a2, a1 and c are all determined).
  const int k = std::max(3, options.sizes);
  std::vector<Call> calls;
  for (int s : spread(std::max(8, min_tokens), max_tokens, k, /*geometric=*/true)) {
    Call c;
    c.llm = true, c.size = s, c.count = std::max(1, static_cast<int>(std::lround(double(rows) / s)));
    c.batch = text_batch(c.count, s);
    calls.push_back(std::move(c));
  }
  std::vector<int> sides = spread(min_side, max_side, k, /*geometric=*/false);
  for (int side = min_side - 1; side >= 1 && sides.size() < 3; --side) sides.insert(sides.begin(), side);
  const int image_text = std::max(2, config.data.text.min);
  for (int side : sides) {
    Call c;
    c.llm = false, c.size = side * side;
    c.count = std::max(1, static_cast<int>(std::lround(double(image_rows) / c.size)));
    c.batch = image_batch(c.count, side, patch, image_text);
    calls.push_back(std::move(c));
  }
  if (log)
    *log << fmt::format(
        "calibrating {} on {} rank(s): {} LLM sizes ({}-{} tokens per sample, ~{} rows per call), {} image "
        "sizes ({}-{} patches, ~{} patches per call), {} repeats after a warm-up\n",
        config.name, world.size, calls.size() - sides.size(), std::max(8, min_tokens), max_tokens, rows,
        sides.size(), sides.front() * sides.front(), sides.back() * sides.back(), image_rows,
        options.repeats);

  // Every rank measures the same calls at the same time (each alone, as in training every core is busy);
  // sizes are interleaved within each pass so a slow spell of a shared machine hits all of them.
  for (int pass = 0; pass <= options.repeats; ++pass) {
    for (Call& c : calls) {
      MPI_Barrier(world.comm);
      const StepOutcome o =
          run_step(sampler, executor, pool, planned_step(c.batch, make_in_order_plan(c.batch, 1), 0, 1));
      if (pass == 0) continue;  // warm-up: first-touch allocations, BLAS buffers
      c.llm_s.push_back(o.seconds[Phase::llm]), c.encoder_s.push_back(o.seconds[Phase::encoder]);
      c.data_s.push_back(o.seconds[Phase::data]);
      c.encoder_forward_s.push_back(o.encoder_forward_seconds);
    }
    if (log) *log << fmt::format("  pass {}/{} done\n", pass, options.repeats) << std::flush;
  }

  // Per call: the median over passes on each rank, then the mean over ranks.
  std::vector<double> medians;
  for (const Call& c : calls)
    medians.insert(medians.end(),
                   {median(c.llm_s), median(c.encoder_s), median(c.data_s), median(c.encoder_forward_s)});
  MPI_Allreduce(MPI_IN_PLACE, medians.data(), static_cast<int>(medians.size()), MPI_DOUBLE, MPI_SUM,
                world.comm);
  for (double& m : medians) m /= world.size;

  Calibration cal;
  cal.deck = config.deck_path, cal.created = utc_now(), cal.host = host_name();
  cal.minimllm_version = MINIMLLM_VERSION, cal.kokkos = kokkos_description();
  cal.ranks = world.size, cal.ranks_per_node = ranks_per_node(world);
  cal.blas_threads = config.runtime.blas_threads, cal.rows_per_call = rows;
  cal.model = config.model;
  std::vector<std::vector<double>> llm_x, enc_x, data_x;
  double encoder_forward = 0.0, encoder_total = 0.0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    const double s = c.size;
    PhaseCalibration& phase = c.llm ? cal.llm : cal.encoder;
    phase.points.sizes.push_back(s);
    phase.points.seconds.push_back(medians[4 * i + (c.llm ? 0 : 1)] / c.count);
    (c.llm ? llm_x : enc_x).push_back({s * s, s, 1.0});
    const double images = c.llm ? 0.0 : c.count, p = c.llm ? 0.0 : s * c.count;
    const double r = c.llm ? s * c.count : (s + image_text) * c.count;
    data_x.push_back({1.0, images, p, r});
    cal.data.images.push_back(images), cal.data.patches.push_back(p), cal.data.tokens.push_back(r);
    cal.data.seconds.push_back(medians[4 * i + 2]);
    if (!c.llm) encoder_forward += medians[4 * i + 3], encoder_total += medians[4 * i + 1];
  }
  if (encoder_total > 0.0) cal.encoder_forward_share = encoder_forward / encoder_total;
  for (PhaseCalibration* phase : {&cal.llm, &cal.encoder}) {
    const LinearFit fit = fit_nonnegative(phase == &cal.llm ? llm_x : enc_x, phase->points.seconds);
    phase->cost = {fit.coefficients[0], fit.coefficients[1], fit.coefficients[2]};
    phase->points.rms_relative_error = fit.rms_relative_error;
    phase->points.max_relative_error = fit.max_relative_error;
  }
  const LinearFit data = fit_nonnegative(data_x, cal.data.seconds);
  cal.data.c = data.coefficients[0], cal.data.per_image = data.coefficients[1];
  cal.data.per_patch = data.coefficients[2], cal.data.per_token = data.coefficients[3];
  cal.data.rms_relative_error = data.rms_relative_error,
  cal.data.max_relative_error = data.max_relative_error;

  // The optimizer over every parameter (the step's two ranges cost the same as one), and the gradient
  // all-reduce on the world, after a barrier (so waiting for a late rank is not counted).
  AdamW optimizer(model, config.optimizer);
  const std::unique_ptr<Communicator> wire =
      create_mpi_communicator(world.comm, consecutive_ranks(0, world.size));
  std::vector<double> opt, sync;
  for (int rep = -1; rep < 3 * options.repeats; ++rep) {
    MPI_Barrier(world.comm);
    double t0 = now_seconds();
    optimizer.step(model, rep + 1);
    const double t1 = now_seconds();
    MPI_Barrier(world.comm);
    const double t2 = now_seconds();
    wire->allreduce_sum(model.grads().data(), model.grads().extent(0));
    const double t3 = now_seconds();
    if (rep >= 0) opt.push_back(t1 - t0), sync.push_back(t3 - t2);
  }
  double fixed[2] = {median(opt) / world.size, world.size > 1 ? median(sync) : 0.0};
  MPI_Allreduce(MPI_IN_PLACE, &fixed[0], 1, MPI_DOUBLE, MPI_SUM, world.comm);
  MPI_Allreduce(MPI_IN_PLACE, &fixed[1], 1, MPI_DOUBLE, MPI_MAX, world.comm);
  cal.optimizer_seconds = fixed[0], cal.grad_sync_seconds = fixed[1];
  cal.parameters = static_cast<long long>(model.parameter_count());

  measure_collectives(world, config.parallel.tp, cal);
  measure_machine(config, world, model, max_tokens, options.repeats, cal);
  cal.gemm_rates = measure_gemm_rates(config, world, std::max(1, options.repeats));
  if (log) print_calibration(*log, cal);
  return cal;
}

void print_calibration(std::ostream& out, const Calibration& c) {
  for (const std::string& note : c.machine_notes) out << "machine " << note << "\n";
  out << fmt::format("calibration: {} rank(s), {} per node, {} BLAS thread(s), ~{} rows per call | {} | {}\n",
                     c.ranks, c.ranks_per_node, c.blas_threads, c.rows_per_call, c.host, c.kokkos);
  out << fmt::format("{:<22} {:>11} {:>11} {:>11} {:>9} {:>9}  {}\n", "term", "a2", "a1", "c", "rms err",
                     "max err", "points");
  const auto phase = [&](const char* name, const PhaseCalibration& p, const char* unit) {
    out << fmt::format(
        "{:<22} {:>11.3e} {:>11.3e} {:>11.3e} {:>8.1f}% {:>8.1f}%  {} sizes, {:.0f}-{:.0f} {}\n", name,
        p.cost.a2, p.cost.a1, p.cost.c, 100 * p.points.rms_relative_error, 100 * p.points.max_relative_error,
        p.points.sizes.size(), p.points.sizes.empty() ? 0.0 : p.points.sizes.front(),
        p.points.sizes.empty() ? 0.0 : p.points.sizes.back(), unit);
  };
  phase("encoder (s/image)", c.encoder, "patches");
  if (c.encoder_forward_share > 0.0)
    out << fmt::format("{:<22} {:.3f} of the encoder's time (1/3 by FLOPs)\n", "encoder forward share",
                       c.encoder_forward_share);
  phase("llm (s/sample)", c.llm, "tokens");
  out << fmt::format(
      "{:<22} {:>11} {:>11.3e} {:>11.3e} {:>8.1f}% {:>8.1f}%  a1 per patch; per image {:.3e}, per token "
      "{:.3e}\n",
      "data (s/rank/step)", "", c.data.per_patch, c.data.c, 100 * c.data.rms_relative_error,
      100 * c.data.max_relative_error, c.data.per_image, c.data.per_token);
  out << fmt::format("{:<22} {:.3f} ms ({} parameters)\n", "optimizer", 1e3 * c.optimizer_seconds,
                     c.parameters);
  out << fmt::format("{:<22} {:.3f} ms ({:.2f} MB on {} ranks; measured directly)\n", "gradient all-reduce",
                     1e3 * c.grad_sync_seconds, 4e-6 * c.parameters, c.ranks);
  const auto link = [&](const std::string& name, const CollectiveCalibration& x) {
    if (!x.measured) {
      out << fmt::format("{:<22} not measured\n", name);
      return;
    }
    out << fmt::format("{:<22} latency {:8.2f} us, bandwidth {:7.2f} GB/s   fit rms {:.1f}%, max {:.1f}%\n",
                       name, 1e6 * x.link.latency, 1e-9 * x.link.bandwidth, 100 * x.points.rms_relative_error,
                       100 * x.points.max_relative_error);
  };
  link("all-gather (node)", c.all_gather);
  link("all-reduce (node)", c.all_reduce);
  link("all-to-all (node)", c.all_to_all);
  link("message (node)", c.point_to_point);
  if (!c.inter_all_gather.measured && !c.inter_all_reduce.measured && !c.inter_all_to_all.measured) {
    out << fmt::format("{:<22} not measured (one node)\n", "between nodes");
  } else {
    link("all-gather (nodes)", c.inter_all_gather);
    link("all-reduce (nodes)", c.inter_all_reduce);
    link("all-to-all (nodes)", c.inter_all_to_all);
    link("message (nodes)", c.inter_point_to_point);
  }
  if (c.tensor_parallel_ranks <= 1)
    out << fmt::format("{:<22} not measured (the deck's parallel.tp is 1)\n", "tensor-parallel all-red.");
  else
    link(fmt::format("all-reduce (tp {})", c.tensor_parallel_ranks), c.tensor_parallel_all_reduce);
  if (!c.gemm_rates.empty()) {
    const auto [lo, hi] = std::minmax_element(
        c.gemm_rates.begin(), c.gemm_rates.end(),
        [](const GemmRatePoint& a, const GemmRatePoint& b) { return a.gflops < b.gflops; });
    out << fmt::format("{:<22} {} shapes, {:.1f} GFLOP/s ({}x{}x{}) to {:.1f} ({}x{}x{})\n", "GEMM rates",
                       c.gemm_rates.size(), lo->gflops, lo->m, lo->n, lo->k, hi->gflops, hi->m, hi->n, hi->k);
  }
}

CostModelChoice choose_cost_model(const RunConfig& config, const World& world, double gflops,
                                  int ranks_per_node, const std::string& path) {
  CostModelChoice choice;
  choice.model = default_cost_model(config, gflops, ranks_per_node);
  std::string file = path;
  if (file.empty() && !config.parallel.cost_model.empty()) {
    file = resolve_against_deck(config.deck_path, config.parallel.cost_model);
    std::error_code ec;
    if (!std::filesystem::is_regular_file(file, ec))
      throw InputError(
          fmt::format("{}: parallel.cost_model = {}: no calibration file at {} (paths are "
                      "relative to the deck's directory; make one with minimllm calibrate)",
                      config.deck_path, config.parallel.cost_model, file));
  }
  if (!file.empty()) {
    const Calibration c = load_calibration(file, &choice.calibration_text);
    choice.model = apply_calibration(choice.model, c, config.model, file);
    choice.intra_measured = c.all_gather.measured, choice.inter_measured = c.inter_all_gather.measured;
    choice.creation_measured = c.machine.comm_creation_ms > 0.0;
    choice.gemm_rates = c.gemm_rates;
    choice.source = file;
  } else if (config.runtime.calibrate) {
    CalibrateOptions quick;
    quick.sizes = 4, quick.repeats = 2;
    const Calibration c = calibrate(config, world, quick);
    choice.model = apply_calibration(choice.model, c, config.model, "runtime.calibrate");
    choice.intra_measured = c.all_gather.measured, choice.inter_measured = c.inter_all_gather.measured;
    choice.creation_measured = c.machine.comm_creation_ms > 0.0;
    choice.gemm_rates = c.gemm_rates;
    choice.source = "calibrated at start-up (runtime.calibrate)";
    choice.calibration_text = calibration_to_yaml(c);
  } else {
    choice.source = "default-from-FLOPs";
  }
  return choice;
}

CostModelChoice restored_cost_model(const RunConfig& config, double gflops, int ranks_per_node,
                                    const std::string& calibration_text, const std::string& source) {
  CostModelChoice choice;
  choice.model = default_cost_model(config, gflops, ranks_per_node);
  if (!calibration_text.empty()) {
    const Calibration c = parse_calibration(calibration_text, source);
    choice.model = apply_calibration(choice.model, c, config.model, source);
    choice.intra_measured = c.all_gather.measured, choice.inter_measured = c.inter_all_gather.measured;
    choice.creation_measured = c.machine.comm_creation_ms > 0.0;
    choice.gemm_rates = c.gemm_rates;
  }
  choice.source = source;
  choice.calibration_text = calibration_text;
  return choice;
}

}  // namespace minimllm
