// The command line: `minimllm run [DECK] [--out FILE] [--steps N] [--global-batch B] [--policy P]
// [--cost-model FILE] [--calibrate] [--reference FILE] [--overwrite] [--checkpoint-every N]
// [--checkpoint FILE] [--restart FILE]`, `minimllm simulate DECK --ranks N [--ranks-per-node R]
// [--machine FILE] [--memory-gib M] [--comm-creation-ms C] [--policy P[,P...]|all] [--cp N|best]
// [--tokens-per-rank T] [--steps N]
// [--gflops G] [--cost-model FILE] [--out FILE] [--overwrite]`, `minimllm calibrate DECK [--out FILE]
// [--sizes K] [--repeats R] [--rows N]
// [--overwrite]`, `minimllm verify FILE... [--out FILE] [--reference FILE] [--overwrite]`, --help, --version.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "minimllm/driver/verify.hpp"  // VerifyRequest

namespace minimllm {

struct RunRequest {
  std::string deck;                 // empty: the embedded quickstart deck
  std::string out;                  // empty: <name>-<UTC timestamp>.h5 in the working directory
  std::optional<int> steps;         // overrides the deck's steps
  std::optional<int> global_batch;  // overrides data.global_batch (weak scaling: grows with the ranks)
  std::string policy;               // overrides parallel.policy; "all": every planner in turn, same data
  std::string cost_model;           // calibration file, overriding parallel.cost_model
  bool calibrate = false;           // calibrate at start-up (runtime.calibrate: true)
  bool overwrite = false;
  std::string reference;     // benchmark reference file, overriding the deck's benchmark.reference
  int checkpoint_every = 0;  // 0: no periodic checkpoints
  std::string checkpoint;    // empty: <out without .h5>.ckpt.h5 when checkpointing
  std::string restart;       // a checkpoint to continue from; empty: a fresh start
  int repeat = 1;            // runs of each policy (interleaved), for the comparison's spread
};

struct SimulateRequest {
  std::string deck;
  int ranks = 1, ranks_per_node = 0;   // ranks_per_node 0: the machine's, else 8
  std::string policy = "all";          // a planner name, a comma-separated list of them, or all
  std::string cp = "best";             // static's context-parallel degree: a positive integer, or best
  std::optional<int> tokens_per_rank;  // overrides parallel.tokens_per_rank
  std::optional<std::string> cp_comm;  // overrides parallel.cp_comm (p2p | a2a | all_gather)
  std::optional<int> steps;
  std::optional<int> global_batch;  // overrides data.global_batch (samples per step at scale)
  double gflops = 0.0;              // 0: machine.peak_gflops, else this machine's sgemm
  double memory_gib = 0.0;          // 0: machine.memory_gib, else detected
  double comm_creation_ms = 0.0;    // 0: machine.comm_creation_ms, else its default
  double planning_ms = -1.0;        // planning work per step charged; < 0: measured
  std::string machine;              // a machine file replacing the deck's machine section; empty: none
  std::string cost_model;           // calibration file, overriding parallel.cost_model
  std::string out;                  // empty: <name>-simulate-<UTC timestamp>.h5 in the working directory
  bool overwrite = false;
};

struct CalibrateRequest {
  std::string deck;
  std::string out;  // empty: <deck name>-calibration.yaml in the working directory
  int sizes = 5, repeats = 3, rows = 0;
  bool overwrite = false;
};

struct CliOutcome {
  std::optional<RunRequest> run;              // set when there is training to do
  std::optional<SimulateRequest> simulate;    // set when there is a simulation to do
  int exit_code = 0;                          // otherwise: 0 after --help/--version, 2 for invalid arguments
  std::optional<CalibrateRequest> calibrate;  // set when there is a calibration to do
  std::optional<VerifyRequest> verify;        // set when there are run files to verify
};

// Parses argv. Help, version and errors are printed to out/err (pass null streams on ranks != 0).
CliOutcome parse_command_line(int argc, char** argv, std::ostream& out, std::ostream& err);

// "static,dhp" -> {"static", "dhp"}: simulate's --policy list (names unchecked; an empty name stays).
std::vector<std::string> split_policy_list(const std::string& value);

// The quickstart deck compiled into the binary (inputs/quickstart.yaml).
const char* embedded_quickstart_deck();

}  // namespace minimllm
