#include "minimllm/core/watchdog.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace minimllm {

namespace {
std::atomic<int> g_step{-1};
std::atomic<const char*> g_where{"start-up"};
std::atomic<double> g_since{0.0};
std::atomic<unsigned long long> g_beats{0};
std::atomic<int> g_peer{-1};

constexpr double kMinimumTimeout = 300.0;  // seconds, the automatic timeout's floor
constexpr double kSlowestStepFactor = 10.0;

// Phases in which a rank waits for the others (collectives), so a stall there is usually another rank's.
// Phases that wait in a collective or for a peer: a checkpoint gathers the moments and agrees on its
// write, planning agrees on rank 0's plan, pipeline stages wait for their neighbours.
bool waits_for_others(const std::string& where) {
  return where == "grad_sync" || where == "kv_exchange" || where == "boundary" || where == "data" ||
         where == "step metrics" || where == "end of run" || where == "checkpoint" || where == "planning" ||
         where == "pipeline";
}
}  // namespace

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void heartbeat(const char* where) { heartbeat_waiting_for(where, -1); }

void heartbeat_waiting_for(const char* where, int peer) {
  g_where.store(where, std::memory_order_relaxed);
  g_peer.store(peer, std::memory_order_relaxed);
  g_since.store(steady_seconds(), std::memory_order_relaxed);
  g_beats.fetch_add(1, std::memory_order_release);
}

void heartbeat_step(int step, const char* where) {
  g_step.store(step, std::memory_order_relaxed);
  heartbeat(where);
}

HeartbeatState heartbeat_state() {
  HeartbeatState state;
  state.beats = g_beats.load(std::memory_order_acquire);
  state.since = g_since.load(std::memory_order_relaxed);
  state.step = g_step.load(std::memory_order_relaxed);
  state.where = g_where.load(std::memory_order_relaxed);
  state.peer = g_peer.load(std::memory_order_relaxed);
  return state;
}

double stall_timeout(double configured, double slowest_step_seconds) {
  if (configured > 0.0) return configured;
  return std::max(kMinimumTimeout, kSlowestStepFactor * slowest_step_seconds);
}

std::string stall_message(int rank, const HeartbeatState& state, double stalled_for, double timeout,
                          bool configured) {
  char line[512];
  const bool waiting = waits_for_others(state.where);
  char peer[160];
  std::snprintf(
      peer, sizeof peer,
      "this rank waits for a message from rank %d, the one to look at unless it printed such a line "
      "too",
      state.peer);
  std::snprintf(line, sizeof line,
                "minimllm: rank %d: stalled: no progress for %.0f s in %s of step %d (runtime.stall_timeout: "
                "%.0f s%s); %s; ending the run (exit 1)",
                rank, stalled_for, state.where, state.step, timeout, configured ? "" : ", automatic",
                state.peer >= 0 ? peer
                : waiting ? "this phase waits for every rank, so another rank may be the one stalled: a rank "
                            "that printed no such line stopped before reaching it"
                          : "this rank itself made no progress");
  return line;
}

void abort_stalled_process(const std::string& line) {
  const std::string text = line + "\n";
  // One write(2): async-signal-safe, unbuffered, not interleaved with other threads' stderr.
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, text.data(), text.size());
  std::_Exit(1);
}

Watchdog::Watchdog(int rank, double configured_timeout, OnStall on_stall, Clock clock, double poll)
    : rank_(rank),
      configured_(configured_timeout),
      on_stall_(on_stall ? std::move(on_stall) : OnStall(abort_stalled_process)),
      clock_(clock ? std::move(clock) : Clock(steady_seconds)),
      // Checks often enough to fire within ~10% of the timeout, at most once a second.
      poll_(poll > 0.0 ? poll : std::min(1.0, std::max(0.05, stall_timeout(configured_timeout, 0.0) / 10.0))),
      last_change_(clock_()),
      last_beats_(heartbeat_state().beats) {
  thread_ = std::thread([this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Watchdog::step_finished(double seconds) {
  double slowest = slowest_.load();
  while (seconds > slowest && !slowest_.compare_exchange_weak(slowest, seconds)) {
  }
}

double Watchdog::timeout() const { return stall_timeout(configured_, slowest_.load()); }

bool Watchdog::check() {
  if (fired_.load()) return false;
  const HeartbeatState state = heartbeat_state();
  // Progress is measured on the watchdog's own clock: from when it first saw the heartbeat move (or from
  // its start), so a stall is detected at most one poll late, never early.
  const double now = clock_();
  if (state.beats != last_beats_) {
    last_beats_ = state.beats, last_change_ = now;
    return false;
  }
  const double stalled_for = now - last_change_;
  const double limit = timeout();
  if (stalled_for < limit) return false;
  fired_.store(true);
  on_stall_(stall_message(rank_, state, stalled_for, limit, configured_ > 0.0));
  return true;
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::duration<double>(poll_));
    if (stop_) break;
    lock.unlock();
    check();
    lock.lock();
  }
}

}  // namespace minimllm
