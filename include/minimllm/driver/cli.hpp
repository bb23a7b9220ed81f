// The command line: `minimllm run [DECK] [--out FILE] [--steps N] [--policy P] [--overwrite]`, --help,
// --version.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>

namespace minimllm {

struct RunRequest {
  std::string deck;          // empty: the embedded quickstart deck
  std::string out;           // empty: <name>-<UTC timestamp>.h5 in the working directory
  std::optional<int> steps;  // overrides the deck's steps
  std::string policy;        // overrides parallel.policy; "all": every planner in turn, same data
  bool overwrite = false;
};

struct CliOutcome {
  std::optional<RunRequest> run;  // set when there is work to do
  int exit_code = 0;              // otherwise: 0 after --help/--version, 2 for invalid arguments
};

// Parses argv. Help, version and errors are printed to out/err (pass null streams on ranks != 0).
CliOutcome parse_command_line(int argc, char** argv, std::ostream& out, std::ostream& err);

// The quickstart deck compiled into the binary (inputs/quickstart.yaml).
const char* embedded_quickstart_deck();

}  // namespace minimllm
