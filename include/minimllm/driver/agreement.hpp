// Input and start-up checks that end in one agreement across ranks (core/agreement.hpp), with the
// exceptions the driver uses: InputError (exit 2) and any other std::exception (exit 1).
#pragma once

#include <exception>
#include <string>
#include <vector>

#include "minimllm/core/agreement.hpp"

namespace minimllm {

// Collective over comm. error: this rank's failure (null when it passed). When any rank failed, every
// rank throws the lowest failing rank's error: InputError with its message when it was invalid input,
// else AgreedFailure (its rank and message). Returns when every rank passed.
//   std::exception_ptr error;
//   try { check(); } catch (...) { error = std::current_exception(); }
//   agree_on_error(world.comm, error);
void agree_on_error(MPI_Comm comm, std::exception_ptr error);

// An input file as one rank read it: what it is ("deck", "calibration file", ...), its path and text.
struct InputText {
  std::string what;
  std::string path;
  std::string text;
  bool present = true;  // false: missing on this rank (its reader reports that, agreed, with its context)
};

// Collective over comm: every rank must have read the same inputs (in the same order on every rank) with
// the same content, compared by sha256 with rank 0's. Throws InputError on every rank, naming the first
// input that differs, the lowest rank that read other bytes and both digests; returns when all agree. An
// input missing on any rank is skipped here.
// A rank that read another deck would otherwise train silently wrong, or abort in a collective.
void agree_on_input_contents(MPI_Comm comm, const std::vector<InputText>& inputs);

}  // namespace minimllm
