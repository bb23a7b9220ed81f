// The stall watchdog (core/watchdog.hpp): its rule, its message and its thread, with an injected clock and
// callback (no real waiting for minutes, no process exit). tests/cli_contract.cmake stops a rank of a
// real run (SIGSTOP) for the end-to-end case.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "minimllm/core/phase.hpp"
#include "minimllm/core/watchdog.hpp"

namespace minimllm {
namespace {

TEST(Watchdog, TimeoutIsConfiguredOrTenSlowestStepsAtLeastFiveMinutes) {
  EXPECT_DOUBLE_EQ(stall_timeout(2.0, 1000.0), 2.0);
  EXPECT_DOUBLE_EQ(stall_timeout(0.0, 0.0), 300.0);
  EXPECT_DOUBLE_EQ(stall_timeout(0.0, 12.0), 300.0);
  EXPECT_DOUBLE_EQ(stall_timeout(0.0, 45.0), 450.0);
}

TEST(Watchdog, PhaseClockBeatsTheHeartbeat) {
  heartbeat_step(7, "planning");
  const double before = heartbeat_state().since;
  PhaseTimes times;
  {
    PhaseClock clock(times, Phase::grad_sync);
    const HeartbeatState state = heartbeat_state();
    EXPECT_EQ(state.step, 7);
    EXPECT_STREQ(state.where, "grad_sync");
    EXPECT_GE(state.since, before);
  }
}

TEST(Watchdog, FiresOnceWhenTheHeartbeatIsStaleNamingRankPhaseAndStep) {
  double offset = 0.0;  // the injected clock: real time plus what the test adds
  std::vector<std::string> lines;
  heartbeat_step(3, "llm");
  // A long poll: the thread stays out of the way; the test calls check() itself.
  Watchdog watchdog(
      5, 2.0, [&](const std::string& line) { lines.push_back(line); },
      [&] { return steady_seconds() + offset; }, 3600.0);
  EXPECT_DOUBLE_EQ(watchdog.timeout(), 2.0);
  EXPECT_FALSE(watchdog.check());
  offset = 1.5;
  EXPECT_FALSE(watchdog.check());
  heartbeat("grad_sync");  // progress: the 2 s count again from when the watchdog sees it
  offset = 3.0;
  EXPECT_FALSE(watchdog.check());
  offset = 4.5;
  EXPECT_FALSE(watchdog.check());
  offset = 5.5;
  EXPECT_TRUE(watchdog.check());
  EXPECT_FALSE(watchdog.check());  // once
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("rank 5: stalled"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("in grad_sync of step 3"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("runtime.stall_timeout: 2 s"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("another rank may be the one stalled"), std::string::npos) << lines[0];
  EXPECT_EQ(lines[0].find('\n'), std::string::npos);
}

// A rank waiting in a checkpoint write (collective: the moments are gathered, the write agreed) may be
// waiting for a stopped rank: its line says so rather than blaming itself.
TEST(Watchdog, ACheckpointWaitsForEveryRank) {
  HeartbeatState state;
  state.where = "checkpoint";
  state.step = 7;
  const std::string line = stall_message(1, state, 30.0, 20.0, true);
  EXPECT_NE(line.find("in checkpoint of step 7"), std::string::npos) << line;
  EXPECT_NE(line.find("another rank may be the one stalled"), std::string::npos) << line;
  state.where = "encoder";
  EXPECT_NE(stall_message(1, state, 30.0, 20.0, true).find("this rank itself made no progress"),
            std::string::npos);
}

// A rank waiting for one peer's message (a pipeline stage's activations or gradients) names that rank.
TEST(Watchdog, AWaitForOnePeerNamesIt) {
  heartbeat_waiting_for("pipeline", 5);
  HeartbeatState state = heartbeat_state();
  EXPECT_EQ(state.peer, 5);
  state.step = 3;
  const std::string line = stall_message(4, state, 30.0, 20.0, true);
  EXPECT_NE(line.find("in pipeline of step 3"), std::string::npos) << line;
  EXPECT_NE(line.find("waits for a message from rank 5"), std::string::npos) << line;
  heartbeat("llm");  // any other progress forgets the peer
  EXPECT_EQ(heartbeat_state().peer, -1);
}

TEST(Watchdog, AutomaticTimeoutFollowsTheSlowestStep) {
  double offset = 0.0;
  int fired = 0;
  heartbeat_step(0, "encoder");
  Watchdog watchdog(
      0, 0.0,
      [&](const std::string& line) {
        ++fired;
        EXPECT_NE(line.find("this rank itself made no progress"), std::string::npos) << line;
      },
      [&] { return steady_seconds() + offset; }, 3600.0);
  watchdog.step_finished(40.0);
  watchdog.step_finished(10.0);
  EXPECT_DOUBLE_EQ(watchdog.timeout(), 400.0);
  offset = 350.0;
  EXPECT_FALSE(watchdog.check());
  offset = 401.0;
  EXPECT_TRUE(watchdog.check());
  EXPECT_EQ(fired, 1);
}

TEST(Watchdog, ItsThreadFiresWithinTheTimeoutAndStopsWhenDestroyed) {
  std::atomic<int> fired{0};
  heartbeat_step(1, "data");
  {
    Watchdog watchdog(0, 0.2, [&](const std::string&) { ++fired; });
    for (int i = 0; i < 200 && fired.load() == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(fired.load(), 1);
  {
    // A heartbeat that keeps moving never fires.
    Watchdog watchdog(0, 0.3, [&](const std::string&) { ++fired; });
    for (int i = 0; i < 50; ++i) {
      heartbeat("llm");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  EXPECT_EQ(fired.load(), 1);
}

}  // namespace
}  // namespace minimllm
