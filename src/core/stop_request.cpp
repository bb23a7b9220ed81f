#include "minimllm/core/stop_request.hpp"

#include <csignal>

namespace minimllm {
namespace {

volatile std::sig_atomic_t requested = 0;

extern "C" void on_stop_request(int) { requested = 1; }

}  // namespace

void install_stop_request_handler() {
  requested = 0;
  std::signal(SIGUSR1, on_stop_request);
}

void remove_stop_request_handler() {
  std::signal(SIGUSR1, SIG_DFL);
  requested = 0;
}

bool stop_requested() { return requested != 0; }

}  // namespace minimllm
