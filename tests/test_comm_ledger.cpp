// The communicator pool's bookkeeping (layout/comm_ledger.hpp): the cap counts what each rank holds, an
// eviction drops a group on all its members, and at 16,384 virtual ranks a repeating pattern of groups
// creates nothing once warm.
#include <gtest/gtest.h>

#include <random>

#include "minimllm/layout/comm_ledger.hpp"

namespace minimllm {
namespace {

TEST(CommLedger, ARepeatingPatternAtScaleCreatesNothingOnceWarm) {
  constexpr int kRanks = 16384;
  // Two alternating layouts: pairs (2i, 2i+1), then groups of four shifted by two. Each rank is in one
  // group of each: 2 communicators per rank, 12,288 groups in the world, far above a cap of 4.
  std::vector<std::vector<int>> pairs, fours;
  for (int r = 0; r < kRanks; r += 2) pairs.push_back({r, r + 1});
  for (int r = 2; r + 4 <= kRanks; r += 4) fours.push_back({r, r + 1, r + 2, r + 3});
  CommLedger ledger(4);
  std::int64_t created[6] = {};
  for (int step = 0; step < 6; ++step)
    for (const auto& group : step % 2 ? fours : pairs) created[step] += ledger.use(group).hit ? 0 : 1;
  EXPECT_EQ(created[0], static_cast<std::int64_t>(pairs.size()));
  EXPECT_EQ(created[1], static_cast<std::int64_t>(fours.size()));
  for (int step = 2; step < 6; ++step) EXPECT_EQ(created[step], 0) << "step " << step;
  EXPECT_EQ(ledger.live_groups(), pairs.size() + fours.size());
  EXPECT_EQ(ledger.held(0), 1);  // only its pair: rank 0 is in no group of four
  EXPECT_EQ(ledger.held(5), 2);
}

TEST(CommLedger, NoRankHoldsMoreThanItsCap) {
  constexpr int kRanks = 64, kCap = 3;
  CommLedger ledger(kCap);
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::vector<int> group;
    const int first = static_cast<int>(rng() % (kRanks - 1));
    const int size = 2 + static_cast<int>(rng() % 6);
    for (int r = first; r < std::min(kRanks, first + size); ++r) group.push_back(r);
    ledger.use(group);
    for (int r = 0; r < kRanks; ++r) ASSERT_LE(ledger.held(r), kCap) << "rank " << r << " after use " << i;
    EXPECT_TRUE(ledger.use(group).hit) << "a group just used is live";
  }
}

TEST(CommLedger, EvictsTheLeastRecentlyUsedGroupOfTheRankAtItsCap) {
  CommLedger ledger(2);
  const std::vector<int> a = {0, 1}, b = {0, 2}, c = {0, 3};
  ledger.use(a);
  ledger.use(b);
  ledger.use(a);  // b is now rank 0's least recent
  const CommLedger::Use use = ledger.use(c);
  EXPECT_FALSE(use.hit);
  ASSERT_EQ(use.evicted.size(), 1u);
  EXPECT_EQ(use.evicted[0], b);
  EXPECT_EQ(ledger.held(2), 0);  // dropped on rank 2 too
  EXPECT_TRUE(ledger.use(a).hit);
  EXPECT_THROW(ledger.use({4}), std::invalid_argument);
  EXPECT_THROW(CommLedger(0), std::invalid_argument);
}

// Start-up groups: every aligned power-of-two block, each rank in one block per size, at most capacity - 1
// sizes; non-power-of-two worlds get the blocks that fit.
TEST(CommLedger, PowerOfTwoBlocksAreAlignedOnePerSizePerRank) {
  const std::vector<std::vector<int>> eight = power_of_two_blocks(8, 64);
  ASSERT_EQ(eight.size(), 4u + 2u + 1u);
  EXPECT_EQ(eight.front(), (std::vector<int>{0, 1}));
  EXPECT_EQ(eight.back(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  CommLedger ledger(64);
  for (const std::vector<int>& block : eight) {
    EXPECT_EQ(block.front() % static_cast<int>(block.size()), 0);
    EXPECT_FALSE(ledger.use(block).hit);
  }
  for (int rank = 0; rank < 8; ++rank) EXPECT_EQ(ledger.held(rank), 3);
  EXPECT_EQ(power_of_two_blocks(8, 3).size(), 4u + 2u);  // two sizes leave one slot for a step's group
  const std::vector<std::vector<int>> six = power_of_two_blocks(6, 64);
  ASSERT_EQ(six.size(), 3u + 1u);  // [0,1], [2,3], [4,5]; [0..3]
  EXPECT_EQ(six.back(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(power_of_two_blocks(1, 64).empty());
  EXPECT_TRUE(power_of_two_blocks(8, 1).empty());
}

}  // namespace
}  // namespace minimllm
