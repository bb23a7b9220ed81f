// Errors agreed across ranks: a check that may fail on only some ranks (a file missing from one rank's
// working directory, an output file only rank 0 opens) ends in one collective agreement, so every rank
// learns that one failed and none is left waiting in a collective. The driver's agree_on_error
// (driver/agreement.hpp) turns exceptions into this and back.
#pragma once

#include <mpi.h>

#include <stdexcept>
#include <string>

namespace minimllm {

// One rank's outcome of a check: code 0 when it passed, else the exit code it calls for (1 runtime
// failure, 2 invalid input) and its one-line message.
struct RankFailure {
  int code = 0;
  int rank = -1;  // the failing rank (the lowest one when several failed)
  std::string message;
  explicit operator bool() const { return code != 0; }
};

// Collective over comm: the failure of the lowest failing rank (its code, rank and message), identical on
// every rank; code 0 when every rank passed. code is this rank's outcome (0: passed).
RankFailure agree_on_failure(MPI_Comm comm, int code, const std::string& message);

// A runtime failure (exit 1) that every rank of a communicator raised together after agree_on_failure:
// the driver prints it once (rank 0) and the process exits in order, without MPI_Abort.
class AgreedFailure : public std::runtime_error {
 public:
  AgreedFailure(int rank, const std::string& message) : std::runtime_error(message), rank_(rank) {}
  int rank() const { return rank_; }  // the rank that failed

 private:
  int rank_;
};

}  // namespace minimllm
