// Input and start-up checks that end in one agreement across ranks (core/agreement.hpp), with the
// exceptions the driver uses: InputError (exit 2) and any other std::exception (exit 1).
#pragma once

#include <exception>

#include "minimllm/core/agreement.hpp"

namespace minimllm {

// Collective over comm. error: this rank's failure (null when it passed). When any rank failed, every
// rank throws the lowest failing rank's error: InputError with its message when it was invalid input,
// else AgreedFailure (its rank and message). Returns when every rank passed.
//   std::exception_ptr error;
//   try { check(); } catch (...) { error = std::current_exception(); }
//   agree_on_error(world.comm, error);
void agree_on_error(MPI_Comm comm, std::exception_ptr error);

}  // namespace minimllm
