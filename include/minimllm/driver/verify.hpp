// `minimllm verify FILE...`: benchmark runs judged again after the fact from their HDF5 files, with the
// checks the runs applied (driver/benchmark.hpp, judge_recorded) and the rules of a reported result
// (docs/RUN_RULES.md, "When a result counts"), and a submission file (JSON, docs/SUBMISSION.md) that
// records the machine, the build, every run and the FOM's median and spread.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace minimllm {

struct VerifyRequest {
  std::vector<std::string> files;       // run files written by `minimllm run` with a benchmark reference
  std::string out = "submission.json";  // the submission file
  std::string reference;   // the reference to judge by; empty: each file's /run/benchmark_reference
  bool overwrite = false;  // replace out when it is a submission file (never another file)
};

// The version of the submission file's layout (docs/SUBMISSION.md); bumped when it changes incompatibly.
constexpr int kSubmissionSchemaVersion = 1;

// Judges every file, prints one line per run, the FOM's median and spread and `VALID` or `INVALID: <every
// failure>` on out (the INVALID line also on err), and writes the submission file (written whether VALID or
// not). Returns 0 when VALID, 3 when INVALID. Throws InputError, one line naming the file and what is
// wrong, for input that cannot be judged (a missing or unreadable file, not a judged benchmark run, a
// reference that cannot be read or belongs to another problem, an output path that exists without
// overwrite or is not a submission file); nothing is written then.
int verify(const VerifyRequest& request, std::ostream& out, std::ostream& err);

}  // namespace minimllm
