// The stall watchdog: the training loop beats a process-wide heartbeat at every phase change
// (PhaseClock::enter) and step; a helper thread per rank ends the run when the heartbeat has not moved
// for the stall timeout, instead of letting a stalled rank (SIGSTOP, a hung file system, a peer that
// vanished) hang every rank until the walltime.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace minimllm {

// Where this process is: the step, what it does (a phase name or another label with static storage) and
// since when (steady_seconds). Beating is lock-free and cheap: a few relaxed atomic stores.
struct HeartbeatState {
  int step = -1;
  const char* where = "start-up";
  double since = 0.0;
  unsigned long long beats = 0;  // how many heartbeats so far: any change is progress
  int peer = -1;                 // the world rank whose message it waits for; -1: none (or a collective)
};
double steady_seconds();            // std::chrono::steady_clock, in seconds (not fenced, unlike now_seconds)
void heartbeat(const char* where);  // progress: now doing `where`
void heartbeat_step(int step, const char* where);  // progress: step `step` begins with `where`
// Progress: now waiting in `where` for one rank's message (world rank `peer`), which a stall names.
void heartbeat_waiting_for(const char* where, int peer);
HeartbeatState heartbeat_state();

// runtime.stall_timeout: `configured` seconds when > 0, else max(300 s, 10 x the slowest step so far).
double stall_timeout(double configured, double slowest_step_seconds);

// The watchdog's one line for a heartbeat that has not moved for `stalled_for` seconds.
std::string stall_message(int rank, const HeartbeatState& state, double stalled_for, double timeout,
                          bool configured);

// A helper thread that, every `poll` seconds, compares the heartbeat's age with the stall timeout; on a
// stall it calls on_stall(line) once. The default on_stall (abort_stalled_process) writes the line to
// stderr and ends this process at once with exit code 1. The thread never calls MPI. The destructor stops
// and joins it.
class Watchdog {
 public:
  using OnStall = std::function<void(const std::string&)>;
  using Clock = std::function<double()>;
  Watchdog(int rank, double configured_timeout, OnStall on_stall = {}, Clock clock = {}, double poll = 0.0);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // A step ended after `seconds`: the automatic timeout follows the slowest step.
  void step_finished(double seconds);
  double timeout() const;
  // One check now (what the thread does every poll); true when it fired.
  bool check();

 private:
  void loop();

  int rank_;
  double configured_;
  OnStall on_stall_;
  Clock clock_;
  double poll_;
  double last_change_;  // the clock when the watchdog last saw the heartbeat move
  unsigned long long last_beats_;
  std::atomic<double> slowest_{0.0};
  std::atomic<bool> fired_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

// Writes `line` and a newline to stderr (one write) and ends the process with std::_Exit(1): no MPI call
// (MPI runs at MPI_THREAD_SINGLE and the main thread may be blocked inside it), no atexit handlers or
// static destructors (HDF5's would close files from the wrong thread). The output file keeps every step
// flushed so far; the launcher ends the other ranks, whose own watchdogs fire after the same timeout
// anyway.
[[noreturn]] void abort_stalled_process(const std::string& line);

}  // namespace minimllm
