#include "minimllm/core/stop_request.hpp"

#include <signal.h>

#include <csignal>
#include <string>

namespace minimllm {
namespace {

volatile std::sig_atomic_t requested = 0;

// SIGTERM and SIGINT (the job ends) outrank SIGUSR1 (the job may resume).
int strength(int signal) { return signal == SIGTERM ? 3 : signal == SIGINT ? 2 : signal == SIGUSR1 ? 1 : 0; }
int of_strength(int s) { return s == 3 ? SIGTERM : s == 2 ? SIGINT : s == 1 ? SIGUSR1 : 0; }

extern "C" void on_stop_request(int signal) {
  if (strength(signal) > strength(requested)) requested = signal;
}

constexpr int kStopSignals[] = {SIGUSR1, SIGTERM, SIGINT};

}  // namespace

void install_stop_request_handler() {
  struct sigaction action {};
  action.sa_handler = on_stop_request;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a read or write in progress goes on
  for (int signal : kStopSignals) sigaction(signal, &action, nullptr);
}

void remove_stop_request_handler() {
  for (int signal : kStopSignals) std::signal(signal, SIG_DFL);
  const int pending = requested;
  requested = 0;
  if (pending != 0) std::raise(pending);
}

int stop_requested() { return requested; }

void clear_stop_request() { requested = 0; }

int agree_on_stop(MPI_Comm comm) {
  int s = strength(requested);
  MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_INT, MPI_MAX, comm);
  return of_strength(s);
}

int stop_exit_code(int signal, bool checkpoint_written) {
  if (signal == SIGUSR1 && checkpoint_written) return 75;
  return 128 + signal;
}

std::string stop_note(int signal, int step, const std::string& checkpoint) {
  const std::string after = std::string(stop_signal_name(signal)) + " after step " + std::to_string(step);
  if (checkpoint.empty())
    return after + ": no checkpoint (the run had no --checkpoint or --checkpoint-every)";
  return after + ": checkpoint " + checkpoint + " holds the state after " + std::to_string(step + 1) +
         " steps; resume with run --restart " + checkpoint;
}

const char* stop_signal_name(int signal) {
  return signal == SIGTERM   ? "SIGTERM"
         : signal == SIGINT  ? "SIGINT"
         : signal == SIGUSR1 ? "SIGUSR1"
                             : "a signal";
}

}  // namespace minimllm
