// InputError: the one exception type for invalid user input (decks, calibration and reference files,
// the command line).
#pragma once

#include <stdexcept>

namespace minimllm {

// Invalid user input (deck or command line): the program prints what() and exits with code 2.
// what() is one line naming the file, the key, the value and what would be valid.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace minimllm
