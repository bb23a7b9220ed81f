// minimllm entry point: MPI and Kokkos set-up, the command line, and exit codes
// (0 success, 1 runtime failure, among them a non-finite loss or gradient with one line naming the step,
// 2 invalid input with one line naming what is wrong, 3 a benchmark run judged INVALID, 75 a run stopped
// by SIGUSR1 after writing its checkpoint, 128 + the signal (143 SIGTERM, 130 SIGINT, 138 SIGUSR1 without
// a checkpoint) for a run a signal stopped after a step; `verify`: 0 VALID, 3 INVALID, 2 a file it cannot
// judge).
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <utility>

#include "minimllm/config/machine_config.hpp"
#include "minimllm/config/run_config.hpp"
#include "minimllm/config/strict_yaml.hpp"
#include "minimllm/core/agreement.hpp"
#include "minimllm/core/device.hpp"
#include "minimllm/core/printable.hpp"
#include "minimllm/core/stop_request.hpp"
#include "minimllm/driver/agreement.hpp"
#include "minimllm/driver/benchmark.hpp"
#include "minimllm/driver/calibrate.hpp"
#include "minimllm/driver/checkpoint.hpp"
#include "minimllm/driver/cli.hpp"
#include "minimllm/driver/run_output.hpp"
#include "minimllm/driver/run_report.hpp"
#include "minimllm/driver/simulator.hpp"
#include "minimllm/driver/verify.hpp"
#include "minimllm/metrics/output_file.hpp"
#include "minimllm/planning/calibration.hpp"
#include "minimllm/planning/planner.hpp"
#include "minimllm/planning/policy_registry.hpp"
#include "minimllm/step/finite_check.hpp"

namespace {

std::string default_output_name(const std::string& run_name) {
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", std::gmtime(&now));
  return run_name + "-" + stamp + ".h5";
}

// "runs/x.h5" + "dhp" -> "runs/x-dhp.h5"
std::string with_suffix(const std::string& path, const std::string& suffix) {
  const auto dot = path.rfind(".h5");
  return dot == std::string::npos ? path + "-" + suffix : path.substr(0, dot) + "-" + suffix + ".h5";
}

// Runs `work` on rank 0 only (the rank that writes); every rank learns whether it failed (agree_on_error)
// and throws the same.
template <class Work>
void on_root(const minimllm::World& world, Work work) {
  std::exception_ptr error;
  try {
    if (world.is_root()) work();
  } catch (...) {
    error = std::current_exception();
  }
  minimllm::agree_on_error(world.comm, error);
}

// Trains, then, for a benchmark run, judges it: the verdict is printed and added to the run's file.
// Returns 3 for an INVALID run, else 0.
int train_and_judge(const minimllm::RunConfig& config, const minimllm::World& world,
                    const minimllm::TrainOptions& options,
                    const std::optional<minimllm::BenchmarkReference>& reference,
                    minimllm::TrainResult& result) {
  result = minimllm::train(config, world, options);
  if (!reference || result.stopped_on_request) return 0;  // an unfinished run is not judged
  const minimllm::BenchmarkVerdict verdict = minimllm::judge_run(config, *reference, result, world);
  on_root(world, [&] {
    minimllm::print_verdict(std::cout, config, *reference, verdict, world.size);
    minimllm::Hdf5RunWriter::update_run_attributes(options.out_path,
                                                   minimllm::verdict_attributes(*reference, verdict));
    if (!verdict.valid) std::cerr << "minimllm: INVALID: " << verdict.reason << std::endl;
  });
  return verdict.valid ? 0 : 3;
}

// What a subcommand reads from files and the command line, read and checked before Kokkos starts, so that
// invalid input (exit 2, one line) is reported before Kokkos prints anything.
struct Input {
  minimllm::RunConfig config;
  std::optional<minimllm::BenchmarkReference> reference;  // run
  std::string out;         // run (before any policy suffix), simulate, calibrate
  std::string checkpoint;  // run: the checkpoint file; empty: none
  // The files every rank reads, whose contents the ranks agree on (the deck, the calibration, the
  // reference, the machine file); a --restart checkpoint is read by rank 0 alone and broadcast.
  std::vector<minimllm::RunInputFile> inputs;
};

// Each of inputs' text as this rank read it (the deck's as parsed, the others read again).
std::vector<minimllm::InputText> input_texts(const Input& input) {
  std::vector<minimllm::InputText> texts;
  for (const minimllm::RunInputFile& file : input.inputs) {
    if (file.what == "deck")
      texts.push_back({file.what, input.config.deck_path, input.config.deck_text});
    else if (!file.path.empty() && !std::filesystem::exists(file.path))  // its reader reports it
      texts.push_back({file.what, file.path, "", false});
    else if (!file.path.empty())
      texts.push_back({file.what, file.path, minimllm::read_input_file(file.path, file.what.c_str())});
  }
  return texts;
}

// The policies a run trains: the deck's or --policy's, or with --policy all every planner.
std::vector<std::string> run_policies(const minimllm::RunRequest& request,
                                      const minimllm::RunConfig& config) {
  if (request.policy == "all") return minimllm::planner_names();
  return {request.policy.empty() ? config.parallel.policy : request.policy};
}

// Whether a run compares runs (every policy, or repetitions): the comparison is printed and written to
// <out stem>-comparison.csv.
bool compares_runs(const minimllm::RunRequest& request) {
  return request.policy == "all" || request.repeat > 1;
}

std::string comparison_path(const std::string& out) {
  const auto dot = out.rfind(".h5");
  return (dot == std::string::npos ? out : out.substr(0, dot)) + "-comparison.csv";
}

// The output file of repetition k (0-based) of a policy: out itself for a single run; <out stem>-<policy>.h5
// with --policy all; -r<k+1> added with --repeat.
std::string run_output_path(const minimllm::RunRequest& request, const std::string& out,
                            const std::string& policy, int k) {
  std::string path = request.policy == "all" ? with_suffix(out, policy) : out;
  return request.repeat > 1 ? with_suffix(path, "r" + std::to_string(k + 1)) : path;
}

// Every output file of a run, repetitions of every policy, and the comparison file.
std::vector<std::string> run_output_paths(const minimllm::RunRequest& request,
                                          const minimllm::RunConfig& config, const std::string& out) {
  std::vector<std::string> paths;
  for (int k = 0; k < request.repeat; ++k)
    for (const std::string& policy : run_policies(request, config))
      paths.push_back(run_output_path(request, out, policy, k));
  if (compares_runs(request)) paths.push_back(comparison_path(out));
  return paths;
}

// The files a run reads, which its output may never replace.
std::vector<minimllm::RunInputFile> run_input_files(const minimllm::RunRequest& request,
                                                    const minimllm::RunConfig& config) {
  std::string cost_model = request.cost_model;
  if (cost_model.empty() && !config.parallel.cost_model.empty())
    cost_model = minimllm::resolve_against_deck(config.deck_path, config.parallel.cost_model);
  std::string reference = request.reference;
  if (reference.empty() && !config.benchmark.reference.empty())
    reference = minimllm::resolve_against_deck(config.deck_path, config.benchmark.reference);
  return {{"deck", request.deck}, {"calibration file", cost_model}, {"benchmark reference", reference}};
}

Input read_run_input(const minimllm::RunRequest& request, const minimllm::World& world) {
  Input input;
  minimllm::RunConfig& config = input.config;
  config = request.deck.empty() ? minimllm::parse_run_config(minimllm::embedded_quickstart_deck(),
                                                             "<embedded quickstart deck>")
                                : minimllm::load_run_config(request.deck);
  minimllm::check_policy(config);
  if (request.steps) config.steps = *request.steps;
  if (request.global_batch) {
    config.data.global_batch = *request.global_batch;
    minimllm::check_run_config(config, config.deck_path + " with --global-batch");
  }
  // A bad reference is invalid input (exit 2, no output file).
  input.reference = minimllm::find_benchmark_reference(config, request.reference);
  input.out = request.out.empty() ? default_output_name(config.name) : request.out;
  input.inputs = run_input_files(request, config);
  const bool checkpointing = request.checkpoint_every > 0 || !request.checkpoint.empty();
  if (checkpointing)
    input.checkpoint =
        request.checkpoint.empty() ? minimllm::default_checkpoint_path(input.out) : request.checkpoint;
  if (compares_runs(request) && (checkpointing || !request.restart.empty()))
    throw minimllm::InputError(
        std::string(request.policy == "all" ? "--policy all" : "--repeat") +
        ": checkpoints and restarts are per run; give one policy and no --repeat with --checkpoint-every, "
        "--checkpoint or --restart");
  if (!request.restart.empty() && input.reference)
    throw minimllm::InputError(
        "--restart " + request.restart +
        ": a benchmark run (benchmark.reference or --reference) cannot be restarted: its figure of merit "
        "and checks need one uninterrupted run (docs/RUN_RULES.md)");
  // Only rank 0 writes: its view of every output path (each policy's with --policy all, the checkpoint)
  // is checked before anything runs.
  if (world.is_root()) {
    std::vector<minimllm::RunInputFile> inputs = run_input_files(request, config);
    std::vector<minimllm::RunInputFile> out_inputs = inputs;
    out_inputs.push_back({"restart checkpoint", request.restart});  // the checkpoint may go on (below)
    for (const std::string& path : run_output_paths(request, config, input.out))
      minimllm::check_output_path(path, request.overwrite, out_inputs);
    if (checkpointing) {
      inputs.push_back({"output file", input.out});
      // A run may go on writing the checkpoint it restarts from (a requeued job's chain); any other
      // existing checkpoint is replaced only with --overwrite.
      const bool continues_chain =
          !request.restart.empty() && minimllm::same_file(input.checkpoint, request.restart);
      minimllm::check_output_path(input.checkpoint, request.overwrite || continues_chain, inputs,
                                  "--checkpoint");
    }
  }
  return input;
}

Input read_simulate_input(const minimllm::SimulateRequest& request, const minimllm::World& world) {
  Input input;
  input.config = minimllm::load_run_config(request.deck);
  minimllm::check_policy(input.config);
  if (request.steps) input.config.steps = *request.steps;
  if (request.global_batch) input.config.data.global_batch = *request.global_batch;
  if (request.tokens_per_rank) input.config.parallel.tokens_per_rank = *request.tokens_per_rank;
  if (request.cp_comm) input.config.parallel.cp_comm = *request.cp_comm;
  if (request.cp != "best" && request.ranks % std::stoi(request.cp) != 0)
    throw minimllm::InputError("--cp " + request.cp + " must divide --ranks " +
                               std::to_string(request.ranks) +
                               " (static forms ranks / cp data-parallel replicas of cp ranks); or --cp best");
  if (!request.machine.empty()) minimllm::load_machine_file(request.machine);  // invalid: exit 2 now
  std::string cost_model = request.cost_model;
  if (cost_model.empty() && !input.config.parallel.cost_model.empty())
    cost_model = minimllm::resolve_against_deck(input.config.deck_path, input.config.parallel.cost_model);
  input.inputs = {
      {"deck", request.deck}, {"calibration file", cost_model}, {"machine file", request.machine}};
  input.out = request.out.empty() ? default_output_name(input.config.name + "-simulate") : request.out;
  if (world.is_root())  // only rank 0 simulates and writes
    minimllm::check_output_path(input.out, request.overwrite, input.inputs);
  return input;
}

Input read_calibrate_input(const minimllm::CalibrateRequest& request) {
  Input input;
  input.config = minimllm::load_run_config(request.deck);
  minimllm::check_policy(input.config);
  input.out = request.out.empty() ? input.config.name + "-calibration.yaml" : request.out;
  input.inputs = {{"deck", request.deck}};
  if (minimllm::same_file(input.out, request.deck))
    throw minimllm::InputError(input.out + ": the calibration file would replace the deck " + request.deck +
                               "; choose another --out");
  minimllm::check_replaceable(input.out, "--out");  // never a link, device, FIFO or directory
  std::error_code ec;
  if (!request.overwrite && std::filesystem::exists(input.out, ec))
    throw minimllm::InputError(input.out + ": output file exists; pass --overwrite to replace it");
  return input;
}

// A run a signal stopped after a step (core/stop_request.hpp): 75 for SIGUSR1 with a checkpoint written
// (EX_TEMPFAIL of sysexits.h, "try again later": a batch script requeues the job on it), else 128 + the
// signal (143 SIGTERM, 130 SIGINT, 138 SIGUSR1 without checkpoints).
int stopped_code(const minimllm::TrainResult& result) {
  return minimllm::stop_exit_code(result.stop_signal, result.checkpoints_written > 0);
}

int run(const minimllm::RunRequest& request, Input input, const minimllm::World& world,
        const std::string& command_line) {
  minimllm::RunConfig& config = input.config;
  const std::optional<minimllm::BenchmarkReference>& reference = input.reference;
  if (request.calibrate) config.runtime.calibrate = true;
  minimllm::TrainOptions options;
  options.out_path = input.out;
  options.overwrite = request.overwrite;
  options.log = &std::cout;
  options.command_line = command_line;
  options.cost_model = request.cost_model;
  options.checkpoint_path = input.checkpoint;
  options.checkpoint_every = request.checkpoint_every;
  options.restart_path = request.restart;
  minimllm::TrainResult result;
  if (!compares_runs(request)) {
    if (!request.policy.empty()) config.parallel.policy = request.policy;
    const int code = train_and_judge(config, world, options, reference, result);
    return result.stopped_on_request ? stopped_code(result) : code;
  }
  // Every policy on the same data, each run from the same initial model; repetitions interleaved (every
  // policy once, then again), so that a drift of the machine spreads over all of them. Every output path
  // was checked before any ran.
  std::vector<minimllm::PolicyRuns> policies;
  for (const std::string& policy : run_policies(request, config)) policies.push_back({policy, {}, {}});
  int code = 0;
  for (int k = 0; k < request.repeat; ++k)
    for (minimllm::PolicyRuns& p : policies) {
      config.parallel.policy = p.policy;
      options.out_path = run_output_path(request, input.out, p.policy, k);
      code = std::max(code, train_and_judge(config, world, options, reference, result));
      p.runs.push_back(result), p.files.push_back(options.out_path);
      if (result.stopped_on_request) return stopped_code(result);  // the runs after it do not run
    }
  on_root(world, [&] {
    minimllm::print_policy_comparison(std::cout, policies, config.parallel.cp);
    const std::string csv = minimllm::policy_comparison_csv(policies, config.parallel.cp);
    const std::string path = comparison_path(input.out);
    minimllm::write_file_atomically(path, csv.data(), csv.size(), "comparison file", "--out",
                                    request.overwrite);
    std::cout << "comparison written to " << path << "\n";
  });
  return code;
}

int simulate(const minimllm::SimulateRequest& request, const Input& input, const minimllm::World& world,
             const std::string& command_line) {
  const minimllm::RunConfig& config = input.config;
  minimllm::SimulateOptions options;
  options.ranks = request.ranks;
  options.ranks_per_node = request.ranks_per_node;
  options.gflops_per_rank = request.gflops;
  options.memory_gib = request.memory_gib;
  options.comm_creation_ms = request.comm_creation_ms;
  if (request.planning_ms >= 0.0) options.planning_seconds = 1e-3 * request.planning_ms;
  options.machine_file = request.machine;
  options.cp = request.cp == "best" ? 0 : std::stoi(request.cp);
  options.policies =
      request.policy == "all" ? minimllm::planner_names() : minimllm::split_policy_list(request.policy);
  options.cost_model = request.cost_model;
  options.out_path = input.out;
  options.command_line = command_line;
  options.overwrite = request.overwrite;
  options.log = &std::cout;
  on_root(world,
          [&] { minimllm::simulate(config, options); });  // serial: the virtual ranks need no real ones
  return 0;
}

int calibrate(const minimllm::CalibrateRequest& request, const Input& input, const minimllm::World& world) {
  const minimllm::RunConfig& config = input.config;
  const std::string& out = input.out;
  minimllm::CalibrateOptions options;
  options.sizes = request.sizes;
  options.repeats = request.repeats;
  options.rows_per_call = request.rows;
  options.log = &std::cout;
  const minimllm::Calibration calibration = minimllm::calibrate(config, world, options);
  on_root(world, [&] {
    // Written beside out and renamed (linked without --overwrite): never through a planted link.
    const std::string text = minimllm::calibration_to_yaml(calibration);
    minimllm::write_file_atomically(out, text.data(), text.size(), "calibration file", "--out",
                                    request.overwrite);
    std::cout << "calibration written to " << out << "\n";
  });
  return 0;
}

// One line in one write: std::cerr writes each << separately, and a rank killed between two writes (an
// MPI_Abort elsewhere) would leave half a message.
// One printable line, whatever input the message echoes (core/printable.hpp).
void print_line(std::ostream& out, const std::string& line) {
  out << minimllm::printable(line) + "\n" << std::flush;
}

// Prints an error every rank raised together (agree_on_error) once, on rank 0; returns its exit code.
int report_agreed(std::exception_ptr error, std::ostream& err) {
  try {
    std::rethrow_exception(error);
  } catch (const minimllm::InputError& e) {
    print_line(err, std::string("minimllm: error: ") + e.what());
    return 2;
  } catch (const minimllm::AgreedFailure& e) {
    print_line(err, "minimllm: rank " + std::to_string(e.rank()) + ": runtime failure: " + e.what());
    return 1;
  }
}

// `minimllm verify`: rank 0 reads and judges the files (nothing to compute: Kokkos is not started); every
// rank returns its exit code.
int verify_files(const minimllm::VerifyRequest& request, const minimllm::World& world) {
  int code = 0;
  if (world.is_root()) {
    try {
      code = minimllm::verify(request, std::cout, std::cerr);
    } catch (const minimllm::InputError& e) {
      print_line(std::cerr, std::string("minimllm: error: ") + e.what());
      code = 2;
    } catch (const std::exception& e) {
      print_line(std::cerr, std::string("minimllm: runtime failure: ") + e.what());
      code = 1;
    }
  }
  MPI_Bcast(&code, 1, MPI_INT, 0, world.comm);
  return code;
}

}  // namespace

// Every input and start-up check ends in one agreement across ranks (driver/agreement.hpp): a failure on
// any rank (a deck missing from one rank's working directory, an output file rank 0 cannot create) is
// printed once and every rank returns its exit code in order. Only a failure in the middle of training,
// when the other ranks wait in a collective, still ends in MPI_Abort, after the HDF5 file was closed.
int main(int argc, char** argv) {
  // Before anything else: SIGUSR1, SIGTERM or SIGINT at start-up is recorded, and a run stops after its
  // first step (core/stop_request.hpp). Again after MPI_Init, in case it installed handlers of its own.
  minimllm::install_stop_request_handler();
  MPI_Init(&argc, &argv);  // first: the checks below agree over MPI (MPI_Init prints nothing)
  minimllm::install_stop_request_handler();
  const minimllm::World world = minimllm::World::of(MPI_COMM_WORLD);
  std::ostringstream discard;
  std::ostream& out = world.is_root() ? std::cout : discard;
  std::ostream& err = world.is_root() ? std::cerr : discard;

  // The command line: its file checks (an existing deck) may pass on some ranks only.
  std::ostringstream parse_errors;
  const minimllm::CliOutcome cli = minimllm::parse_command_line(argc, argv, out, parse_errors);
  int code = cli.exit_code;
  const minimllm::RankFailure parse_failure =
      minimllm::agree_on_failure(world.comm, code == 0 ? 0 : 2, parse_errors.str());
  if (parse_failure) {
    err << parse_failure.message << std::flush;
    MPI_Finalize();
    return 2;
  }
  // Only a run stops between steps; simulate and calibrate end as the signal's default action does.
  if (!cli.run) minimllm::remove_stop_request_handler();
  if (cli.verify) {
    code = verify_files(*cli.verify, world);
    MPI_Finalize();
    return code;
  }

  std::optional<Input> input;
  try {
    std::exception_ptr error;
    try {
      if (cli.run)
        input = read_run_input(*cli.run, world);
      else if (cli.simulate)
        input = read_simulate_input(*cli.simulate, world);
      else if (cli.calibrate)
        input = read_calibrate_input(*cli.calibrate);
    } catch (...) {
      error = std::current_exception();
    }
    minimllm::agree_on_error(world.comm, error);
    // Every rank read the same bytes of every input (a rank started in another directory, with another
    // deck, would train silently wrong): exit 2 naming the file and the first rank that differs.
    std::vector<minimllm::InputText> texts;
    try {
      texts = input_texts(*input);
    } catch (...) {
      error = std::current_exception();
    }
    minimllm::agree_on_error(world.comm, error);
    minimllm::agree_on_input_contents(world.comm, texts);
  } catch (...) {
    code = report_agreed(std::current_exception(), err);
    input.reset();
  }
  if (input) {
    bool kokkos_started = false;
    try {
      std::exception_ptr error;
      try {
        // One GPU per rank on CUDA; Kokkos::initialize() on host, with the defaults of
        // minimllm::kokkos_environment_note() so Kokkos's warnings cannot break one-line errors.
        minimllm::initialize_kokkos(world.comm);
        kokkos_started = true;
      } catch (const std::exception& e) {
        // E.g. a CUDA build on a machine without a usable GPU or driver.
        error = std::make_exception_ptr(std::runtime_error(
            std::string("cannot start Kokkos (") + Kokkos::DefaultExecutionSpace::name() + "): " + e.what()));
      }
      minimllm::agree_on_error(world.comm, error);
    } catch (...) {
      code = report_agreed(std::current_exception(), err);
      input.reset();
    }
    if (input) {
      try {
        std::string command_line;
        for (int i = 0; i < argc; ++i) command_line += (i ? " " : "") + std::string(argv[i]);
        code = cli.run        ? run(*cli.run, std::move(*input), world, command_line)
               : cli.simulate ? simulate(*cli.simulate, *input, world, command_line)
                              : calibrate(*cli.calibrate, *input, world);
      } catch (const minimllm::InputError& e) {
        // Agreed input errors a run can check only once started (an output file, a calibration file).
        print_line(err, std::string("minimllm: error: ") + e.what());
        code = 2;
      } catch (const minimllm::NonFiniteError& e) {
        // Every rank checked the same synchronised loss and gradient and stopped at the same step; the
        // output file was closed on the way out. One line, exit 1, no abort.
        print_line(err, std::string("minimllm: ") + e.what());
        code = 1;
      } catch (const minimllm::AgreedFailure& e) {
        print_line(err, "minimllm: rank " + std::to_string(e.rank()) + ": runtime failure: " + e.what());
        code = 1;
      } catch (const std::exception& e) {
        // A failure of this rank alone while the others may wait in a collective. The HDF5 file, held in
        // train()'s scope, is closed by now (never MPI_Abort with a file open); one rank needs no abort.
        print_line(std::cerr,
                   "minimllm: rank " + std::to_string(world.rank) + ": runtime failure: " + e.what());
        if (world.size > 1) {
          // The launcher forwards this rank's stderr through a pipe; MPICH's Hydra may tear that down on
          // the abort before it drained it, losing the line (seen under load). A moment to forward it.
          std::this_thread::sleep_for(std::chrono::milliseconds(250));
          MPI_Abort(world.comm, 1);
        }
        code = 1;
      }
    }
    if (kokkos_started) Kokkos::finalize();
  }
  MPI_Finalize();
  return code;
}
