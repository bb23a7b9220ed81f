// MPI communicator collectives, point-to-point messages and host values on groups of 1-4 ranks, and
// CommPool's caching, LRU eviction and agreement across ranks under per-step regrouping. Adapts to the world
// size; parts needing more ranks are skipped.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "minimllm/core/types.hpp"
#include "minimllm/parallel/comm_pool.hpp"
#include "minimllm/parallel/communicator.hpp"
#include "mpi_world.hpp"

namespace minimllm {
namespace {

using Group = std::vector<int>;
using Step = std::vector<Group>;

using testing_support::world_rank;
using testing_support::world_size;

bool contains(const Group& group, int rank) { return std::binary_search(group.begin(), group.end(), rank); }

const Group& my_group(const Step& step) {
  for (const auto& group : step) {
    if (contains(group, world_rank())) return group;
  }
  throw std::logic_error("step does not cover this rank");
}

// Consecutive groups of `size` ranks (the last one may be smaller).
Step chunks(int world, int size) {
  Step step;
  for (int first = 0; first < world; first += size) {
    step.emplace_back();
    for (int r = first; r < std::min(first + size, world); ++r) step.back().push_back(r);
  }
  return step;
}

// Groups that differ per rank from step to step, written for 4 ranks; project() keeps the ranks of a
// smaller world, so every world size runs a meaningful plan.
const std::vector<Step> kFourRankPlan = {
    {{0, 1}, {2}, {3}}, {{0}, {1, 2, 3}}, {{0, 2}, {1, 3}}, {{0, 3}, {1}, {2}},
    {{0, 1, 2, 3}},     {{1, 2}, {0, 3}}, {{0, 1, 3}, {2}},
};

Step project(const Step& step, int world) {
  Step projected;
  for (const auto& group : step) {
    Group kept;
    for (int r : group) {
      if (r < world) kept.push_back(r);
    }
    if (!kept.empty()) projected.push_back(kept);
  }
  return projected;
}

// A deterministic pseudo-random partition of the world (the same on every rank).
Step random_step(int world, std::uint32_t seed) {
  std::uint32_t state = seed * 2654435761u + 12345u;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 8;
  };
  std::vector<int> order(world);
  std::iota(order.begin(), order.end(), 0);
  for (int i = world - 1; i > 0; --i) std::swap(order[i], order[next() % (i + 1)]);
  Step step;
  for (int first = 0; first < world;) {
    const int length = std::min<int>(1 + next() % world, world - first);
    Group group(order.begin() + first, order.begin() + first + length);
    std::sort(group.begin(), group.end());
    step.push_back(group);
    first += length;
  }
  return step;
}

std::set<Group> shared_groups(const std::vector<Step>& steps) {
  std::set<Group> groups;
  for (const auto& step : steps) {
    for (const auto& group : step) {
      if (group.size() > 1) groups.insert(group);
    }
  }
  return groups;
}

// A MemSpace buffer filled on the host: value(i).
t_vec make_buffer(const char* label, std::size_t count, const std::function<float(std::size_t)>& value) {
  t_vec buffer(std::string(label), count);
  auto host = Kokkos::create_mirror_view(buffer);
  for (std::size_t i = 0; i < count; ++i) host(i) = value(i);
  Kokkos::deep_copy(buffer, host);
  return buffer;
}

// Compares a MemSpace buffer with expected(i); reports the first mismatch only.
void expect_buffer(const t_vec& buffer, const std::function<float(std::size_t)>& expected,
                   const std::string& what) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), buffer);
  for (std::size_t i = 0; i < host.extent(0); ++i) {
    if (host(i) != expected(i)) {
      ADD_FAILURE() << what << ": element " << i << " is " << host(i) << ", expected " << expected(i)
                    << " (world rank " << world_rank() << ")";
      return;
    }
  }
}

void check_allreduce(Communicator& comm) {
  const auto& members = comm.world_ranks();
  const float member_sum = static_cast<float>(std::accumulate(members.begin(), members.end(), 0));
  const float me = static_cast<float>(world_rank());
  t_vec data = make_buffer("data", 17, [&](std::size_t i) { return 100 * me + i; });
  comm.allreduce_sum(data.data(), data.extent(0));
  expect_buffer(
      data, [&](std::size_t i) { return 100 * member_sum + comm.size() * static_cast<float>(i); },
      "allreduce_sum");
}

// Uneven counts with zeros for some ranks, e.g. {1, 0, 3, 2} and {0, 2, 1, 0}.
std::vector<std::vector<std::size_t>> count_patterns(int size) {
  std::vector<std::vector<std::size_t>> patterns(3, std::vector<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    patterns[0][r] = (3 * r + 1) % 4;
    patterns[1][r] = (2 * r) % 3;
    patterns[2][r] = 0;
  }
  return patterns;
}

void check_allgatherv(Communicator& comm) {
  const auto& members = comm.world_ranks();
  for (const auto& counts : count_patterns(comm.size())) {
    const std::size_t mine = counts[comm.rank()];
    t_vec send = make_buffer("send", mine, [&](std::size_t k) { return 1000.0f * world_rank() + k; });
    std::vector<float> expected;
    for (int r = 0; r < comm.size(); ++r) {
      for (std::size_t k = 0; k < counts[r]; ++k) expected.push_back(1000.0f * members[r] + k);
    }
    t_vec recv("recv", expected.size());
    comm.allgatherv(send.data(), mine, recv.data(), counts);
    expect_buffer(
        recv, [&](std::size_t i) { return expected[i]; }, "allgatherv");
  }
}

void check_reduce_scatterv(Communicator& comm) {
  const auto& members = comm.world_ranks();
  const float weight_sum =
      static_cast<float>(std::accumulate(members.begin(), members.end(), 0) + comm.size());
  for (const auto& counts : count_patterns(comm.size())) {
    std::vector<float> send_values;
    for (int r = 0; r < comm.size(); ++r) {
      for (std::size_t k = 0; k < counts[r]; ++k)
        send_values.push_back((world_rank() + 1.0f) * (1000.0f * r + k));
    }
    t_vec send = make_buffer("send", send_values.size(), [&](std::size_t i) { return send_values[i]; });
    t_vec recv("recv", counts[comm.rank()]);
    comm.reduce_scatterv(send.data(), recv.data(), counts);
    expect_buffer(
        recv, [&](std::size_t k) { return weight_sum * (1000.0f * comm.rank() + k); }, "reduce_scatterv");
  }
}

// Rank r sends (r + 2 * p) % 3 floats to group rank p, encoded by sender, receiver and index. With
// gaps, every receive block is followed by one float that must keep its old value.
void check_alltoallv(Communicator& comm, bool gaps) {
  const auto& members = comm.world_ranks();
  const int n = comm.size(), me = comm.rank();
  const auto count = [](int from, int to) { return static_cast<std::size_t>((from + 2 * to) % 3); };
  const auto value = [&](int from, int to, std::size_t k) {
    return 1000.0f * members[from] + 100.0f * to + static_cast<float>(k);
  };
  std::vector<std::size_t> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  std::vector<float> send_values, expected;
  constexpr float kGap = -7.0f;
  // Send blocks in reverse rank order, so displacements are not simply increasing.
  for (int p = n - 1; p >= 0; --p) {
    send_counts[p] = count(me, p);
    send_displs[p] = send_values.size();
    for (std::size_t k = 0; k < send_counts[p]; ++k) send_values.push_back(value(me, p, k));
  }
  for (int p = 0; p < n; ++p) {
    recv_counts[p] = count(p, me);
    recv_displs[p] = expected.size();
    for (std::size_t k = 0; k < recv_counts[p]; ++k) expected.push_back(value(p, me, k));
    if (gaps) expected.push_back(kGap);
  }
  t_vec send = make_buffer("send", send_values.size(), [&](std::size_t i) { return send_values[i]; });
  t_vec recv = make_buffer("recv", expected.size(), [&](std::size_t) { return kGap; });
  comm.alltoallv(send.data(), send_counts, send_displs, recv.data(), recv_counts, recv_displs);
  expect_buffer(
      recv, [&](std::size_t i) { return expected[i]; }, gaps ? "alltoallv with gaps" : "alltoallv");
}

// Every rank sends 1 + (r + p) % 3 floats to each other group rank p, in one batched isend, after posting
// its receives (the pipeline's order); receive blocks are in rank order with one untouched float after
// each. Then a ring of single messages on another tag.
void check_point_to_point(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const auto count = [](int from, int to) { return static_cast<std::size_t>(1 + (from + to) % 3); };
  const auto value = [](int from, int to, std::size_t k) {
    return 1000.0f * from + 100.0f * to + static_cast<float>(k);
  };
  constexpr float kGap = -7.0f;
  constexpr int kTag = 11;
  std::vector<MessageBlock> send_blocks, recv_blocks;
  std::vector<float> send_values, expected;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    send_blocks.push_back({p, send_values.size(), count(me, p)});
    for (std::size_t k = 0; k < count(me, p); ++k) send_values.push_back(value(me, p, k));
    recv_blocks.push_back({p, expected.size(), count(p, me)});
    for (std::size_t k = 0; k < count(p, me); ++k) expected.push_back(value(p, me, k));
    expected.push_back(kGap);
  }
  t_vec send = make_buffer("send", send_values.size(), [&](std::size_t i) { return send_values[i]; });
  t_vec recv = make_buffer("recv", expected.size(), [&](std::size_t) { return kGap; });
  auto receives = comm.irecv(recv.data(), recv.extent(0), recv_blocks, kTag);
  auto sends = comm.isend(send.data(), send.extent(0), send_blocks, kTag);
  receives->wait();
  receives->wait();  // a second wait does nothing
  sends->wait();
  expect_buffer(
      recv, [&](std::size_t i) { return expected[i]; }, "isend / irecv blocks");

  t_vec mine = make_buffer("mine", 3, [&](std::size_t k) { return value(me, 0, k); });
  t_vec from_previous = make_buffer("from_previous", 3, [](std::size_t) { return kGap; });
  auto ring_receive = comm.irecv(from_previous.data(), 3, (me + n - 1) % n, kTag + 1);
  auto ring_send = comm.isend(mine.data(), 3, (me + 1) % n, kTag + 1);
  ring_send->wait();
  ring_receive->wait();
  expect_buffer(
      from_previous, [&](std::size_t k) { return value((me + n - 1) % n, 0, k); }, "isend / irecv ring");
  EXPECT_GE(comm.max_tag(), 32767);
}

void check_host_values(Communicator& comm) {
  const auto& members = comm.world_ranks();
  const double expected_sum = std::accumulate(members.begin(), members.end(), 0.0) + 0.5 * comm.size();
  EXPECT_EQ(comm.allreduce_sum(world_rank() + 0.5), expected_sum);
  EXPECT_EQ(comm.allreduce_min(world_rank()), members.front());
  const int n = comm.size(), me = comm.rank();
  std::vector<int> send(2 * static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r)
    for (int j = 0; j < 2; ++j) send[2 * r + j] = 100 * me + 10 * r + j;
  const std::vector<int> recv = comm.alltoall(send, 2);
  ASSERT_EQ(recv.size(), send.size());
  for (int s = 0; s < n; ++s)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(recv[2 * s + j], 100 * s + 10 * me + j) << "from group rank " << s;
  EXPECT_THROW(comm.alltoall(send, 3), std::invalid_argument);
}

void check_collectives(Communicator& comm, const Group& group) {
  ASSERT_EQ(comm.world_ranks(), group);
  ASSERT_EQ(comm.size(), static_cast<int>(group.size()));
  ASSERT_EQ(group[comm.rank()], world_rank());
  check_allreduce(comm);
  check_allgatherv(comm);
  check_reduce_scatterv(comm);
  check_alltoallv(comm, false);
  check_alltoallv(comm, true);
  check_point_to_point(comm);
  check_host_values(comm);
}

void check_groups_of(int size) {
  const Step step = chunks(world_size(), size);
  const Group& group = my_group(step);
  auto comm = create_mpi_communicator(MPI_COMM_WORLD, group);
  EXPECT_STREQ(comm->backend(), "mpi");
  check_collectives(*comm, group);
}

#define SKIP_BELOW_RANKS(n)                                                                              \
  do {                                                                                                   \
    if (world_size() < (n)) GTEST_SKIP() << "needs at least " << (n) << " ranks, have " << world_size(); \
  } while (false)

TEST(MpiCommunicator, GroupOfOne) { check_groups_of(1); }

TEST(MpiCommunicator, GroupsOfTwo) {
  SKIP_BELOW_RANKS(2);
  check_groups_of(2);
}

TEST(MpiCommunicator, GroupsOfThree) {
  SKIP_BELOW_RANKS(3);
  check_groups_of(3);
}

TEST(MpiCommunicator, GroupOfFour) {
  SKIP_BELOW_RANKS(4);
  check_groups_of(4);
}

TEST(MpiCommunicator, RejectsMismatchedCounts) {
  auto comm = create_mpi_communicator(MPI_COMM_WORLD, {world_rank()});
  t_vec buffer("buffer", 4);
  EXPECT_THROW(comm->allgatherv(buffer.data(), 2, buffer.data(), {1}), std::invalid_argument);
  EXPECT_THROW(comm->allgatherv(buffer.data(), 1, buffer.data(), {1, 1}), std::invalid_argument);
  EXPECT_THROW(comm->reduce_scatterv(buffer.data(), buffer.data(), {1, 1}), std::invalid_argument);
}

void expect_same_on_all_ranks(std::int64_t value, const char* what) {
  std::int64_t low = 0, high = 0;
  MPI_Allreduce(&value, &low, 1, MPI_INT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&value, &high, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(low, high) << what << " differs between ranks";
}

void expect_stats_agree(const CommPoolStats& stats) {
  expect_same_on_all_ranks(stats.hits, "hits");
  expect_same_on_all_ranks(stats.misses, "misses");
  expect_same_on_all_ranks(stats.creations, "creations");
  expect_same_on_all_ranks(stats.evictions, "evictions");
}

TEST(CommPool, SingletonGroupsAreNotPooled) {
  CommPool pool(MPI_COMM_WORLD, 2, create_mpi_communicator);
  auto self = pool.acquire({world_rank()});
  ASSERT_NE(self, nullptr);
  EXPECT_EQ(self->size(), 1);
  EXPECT_EQ(pool.acquire({world_rank()}), self);  // kept, not re-created
  check_collectives(*self, {world_rank()});
  if (world_size() > 1) {
    EXPECT_EQ(pool.acquire({(world_rank() + 1) % world_size()}), nullptr);
  }
  EXPECT_EQ(pool.stats().hits + pool.stats().misses + pool.stats().creations + pool.stats().live, 0);
}

TEST(CommPool, RepeatingPatternCreatesNothingOnSecondPass) {
  std::vector<Step> plan;
  for (const auto& step : kFourRankPlan) plan.push_back(project(step, world_size()));
  const std::set<Group> distinct = shared_groups(plan);
  std::int64_t acquires = 0, mine = 0;
  for (const auto& step : plan) {
    for (const auto& group : step) acquires += group.size() > 1;
  }
  for (const auto& group : distinct) mine += contains(group, world_rank());

  CommPool pool(MPI_COMM_WORLD, 64, create_mpi_communicator);
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& step : plan) {
      // Per group, so non-members can be checked to get nothing.
      for (const auto& group : step) {
        auto comm = pool.acquire(group);
        ASSERT_EQ(comm != nullptr, contains(group, world_rank()));
        if (comm) check_allreduce(*comm);
      }
    }
    const CommPoolStats& stats = pool.stats();
    EXPECT_EQ(stats.misses, static_cast<std::int64_t>(distinct.size())) << "pass " << pass;
    EXPECT_EQ(stats.creations, static_cast<std::int64_t>(distinct.size())) << "pass " << pass;
    EXPECT_EQ(stats.hits, (pass + 1) * acquires - static_cast<std::int64_t>(distinct.size()))
        << "pass " << pass;
    EXPECT_EQ(stats.evictions, 0);
    EXPECT_EQ(stats.live, mine);
  }
  expect_stats_agree(pool.stats());
}

TEST(CommPool, GroupsDifferingPerRankDoNotDeadlock) {
  CommPool pool(MPI_COMM_WORLD, 64, create_mpi_communicator);
  for (int round = 0; round < 3; ++round) {
    for (const auto& plan_step : kFourRankPlan) {
      const Step step = project(plan_step, world_size());
      auto comm = pool.acquire_step(step);
      ASSERT_NE(comm, nullptr);
      check_collectives(*comm, my_group(step));
    }
  }
  expect_stats_agree(pool.stats());
}

TEST(CommPool, CappedPoolUnderChurn) {
  constexpr int kCapacity = 2, kSteps = 20;
  std::vector<Step> steps;
  for (int i = 0; i < kSteps; ++i) {
    // Alternate the fixed plan (groups come back after eviction) with random partitions.
    steps.push_back(i % 2 == 0 ? project(kFourRankPlan[(i / 2) % kFourRankPlan.size()], world_size())
                               : random_step(world_size(), i));
  }
  CommPool pool(MPI_COMM_WORLD, kCapacity, create_mpi_communicator);
  std::int64_t most_live = 0;
  for (const auto& step : steps) {
    {
      auto comm = pool.acquire_step(step);  // released before the next step
      ASSERT_NE(comm, nullptr);
      check_collectives(*comm, my_group(step));
    }
    most_live = std::max(most_live, pool.stats().live);
  }
  std::int64_t most_live_anywhere = 0;
  MPI_Allreduce(&most_live, &most_live_anywhere, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_LE(most_live_anywhere, kCapacity);
  expect_stats_agree(pool.stats());
  if (world_size() >= 3) {  // fewer ranks have at most one shared group: nothing to evict
    EXPECT_GT(pool.stats().evictions, 0);
    EXPECT_GT(pool.stats().creations, static_cast<std::int64_t>(shared_groups(steps).size()))
        << "expected evicted groups to be created again";
  }
}

TEST(CommPool, CapCountsTheCommunicatorsEachRankHolds) {
  SKIP_BELOW_RANKS(3);
  const Group a = {0, 1}, b = {1, 2}, c = {0, 2}, all = {0, 1, 2};
  CommPool pool(MPI_COMM_WORLD, 2, create_mpi_communicator);
  auto step = [&pool](const Group& group, std::int64_t hits, std::int64_t evictions) {
    auto comm = pool.acquire(group);
    if (comm) check_allreduce(*comm);
    EXPECT_EQ(pool.stats().hits, hits) << "after acquiring " << ::testing::PrintToString(group);
    EXPECT_EQ(pool.stats().evictions, evictions) << "after acquiring " << ::testing::PrintToString(group);
    EXPECT_LE(pool.stats().live, 2);
  };
  step(a, 0, 0);
  step(b, 0, 0);
  step(a, 1, 0);    // a is now rank 1's most recent
  step(c, 1, 0);    // ranks 0 and 2 hold one each: room for c, three groups live, none evicted
  step(all, 1, 2);  // rank 0, at its cap, drops a (its least recent); rank 2 drops b
  step(c, 2, 2);
  EXPECT_EQ(pool.stats().creations, 4);
  const int rank = world_rank();
  EXPECT_EQ(pool.stats().live, contains(c, rank) + contains(all, rank));  // c and all live
}

// Groups created at start-up (overlapping: every power-of-two block) are hits when a step uses them, and
// their communicators work.
TEST(CommPool, PrecreatedGroupsAreHitsAtTheFirstStep) {
  SKIP_BELOW_RANKS(2);
  CommPool pool(MPI_COMM_WORLD, 64, create_mpi_communicator);
  const std::vector<std::vector<int>> blocks = power_of_two_blocks(world_size(), pool.capacity());
  pool.precreate(blocks);
  const CommPoolStats before = pool.stats();
  EXPECT_EQ(before.creations, static_cast<std::int64_t>(blocks.size()));
  const int rank = world_rank();
  for (const std::vector<int>& block : blocks) {
    const std::shared_ptr<Communicator> comm = pool.acquire_step({block});
    ASSERT_EQ(comm != nullptr, contains(block, rank));
    if (comm) check_allreduce(*comm);
  }
  EXPECT_EQ(pool.stats().creations, before.creations);
  EXPECT_EQ(pool.stats().hits - before.hits, static_cast<std::int64_t>(blocks.size()));
}

TEST(CommPool, EvictedCommunicatorStaysValidWhileHeld) {
  SKIP_BELOW_RANKS(3);
  Group everyone(world_size());
  std::iota(everyone.begin(), everyone.end(), 0);
  CommPool pool(MPI_COMM_WORLD, 1, create_mpi_communicator);
  auto held = pool.acquire(everyone);
  pool.acquire({0, 1});  // evicts `everyone`
  EXPECT_EQ(pool.stats().evictions, 1);
  EXPECT_EQ(pool.stats().live, world_rank() <= 1 ? 1 : 0);
  check_collectives(*held, everyone);
}

void expect_invalid(const std::function<void()>& call, const std::string& message_part) {
  try {
    call();
    ADD_FAILURE() << "expected std::invalid_argument mentioning '" << message_part << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(message_part), std::string::npos) << e.what();
  }
}

TEST(CommPool, RejectsInvalidRankSets) {
  const int world = world_size();
  CommPool pool(MPI_COMM_WORLD, 2, create_mpi_communicator);
  expect_invalid([&] { pool.acquire({}); }, "empty rank set");
  expect_invalid([&] { pool.acquire({0, 0}); }, "not sorted and unique");
  expect_invalid([&] { pool.acquire({-1}); }, "outside the world");
  expect_invalid([&] { pool.acquire({0, world}); }, "outside the world");
  if (world >= 2) expect_invalid([&] { pool.acquire({1, 0}); }, "not sorted and unique");
  expect_invalid([&] { pool.acquire_step({{0}, {0}}); }, "more than one group");
  const CommPoolStats& stats = pool.stats();
  EXPECT_EQ(stats.hits + stats.misses + stats.creations + stats.live, 0) << "a rejected set changed the pool";

  expect_invalid([&] { CommPool(MPI_COMM_WORLD, 0, create_mpi_communicator); }, "capacity 0");
  expect_invalid([&] { CommPool(MPI_COMM_WORLD, 1, nullptr); }, "empty factory");
  expect_invalid([&] { create_mpi_communicator(MPI_COMM_WORLD, {world}); }, "outside the world");
  if (world >= 2) {
    expect_invalid([&] { create_mpi_communicator(MPI_COMM_WORLD, {(world_rank() + 1) % world}); },
                   "not in the group");
  }
}

TEST(MpiCommunicator, RejectsMismatchedAlltoallvCounts) {
  auto comm = create_mpi_communicator(MPI_COMM_WORLD, {world_rank()});
  t_vec buffer("buffer", 4);
  EXPECT_THROW(comm->alltoallv(buffer.data(), {1}, {0}, buffer.data(), {2}, {0}), std::invalid_argument);
  EXPECT_THROW(comm->alltoallv(buffer.data(), {1, 1}, {0}, buffer.data(), {1}, {0}), std::invalid_argument);
}

TEST(Collectives, ChoiceIsAgreedAndExplained) {
  const CollectivesChoice mpi = choose_collectives(MPI_COMM_WORLD, "mpi");
  EXPECT_EQ(mpi.backend, "mpi");
  const CollectivesChoice automatic = choose_collectives(MPI_COMM_WORLD, "auto");
  EXPECT_FALSE(automatic.reason.empty());
  std::string why;
  const bool nccl = nccl_device_path_available(MPI_COMM_WORLD, why);
  EXPECT_EQ(automatic.backend, nccl ? "nccl" : "mpi");
  if (!nccl_compiled() || kMemSpaceIsHostAccessible) {
    EXPECT_FALSE(nccl) << "NCCL without NCCL, or on host memory";
  }
  if (nccl) {
    EXPECT_EQ(choose_collectives(MPI_COMM_WORLD, "nccl").backend, "nccl");
  } else {
    EXPECT_FALSE(why.empty());
    try {
      choose_collectives(MPI_COMM_WORLD, "nccl");
      ADD_FAILURE() << "nccl was accepted where it cannot run";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(choose_collectives(MPI_COMM_WORLD, "gloo"), std::invalid_argument);
  // Every rank made the same choice.
  int is_nccl = automatic.backend == "nccl", all = 0;
  MPI_Allreduce(&is_nccl, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_TRUE(all == 0 || all == world_size());
}

TEST(NcclCommunicator, ClearErrorWhenBuiltWithoutNccl) {
  if (nccl_compiled()) GTEST_SKIP() << "built with NCCL";
  try {
    create_nccl_communicator(MPI_COMM_WORLD, {world_rank()});
    ADD_FAILURE() << "create_nccl_communicator succeeded in a build without NCCL";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("-DMINIMLLM_ENABLE_NCCL=ON"), std::string::npos) << e.what();
  }
}

// With NCCL compiled in: either a clear error (no usable GPU, as on the CI machine) or correct results.
// Singletons run on any GPU count; the whole world needs one GPU per rank (NCCL rejects shared GPUs).
// Failures must reach every member, or this test would hang.
void check_nccl_group(const Group& group) {
  if (!nccl_compiled()) GTEST_SKIP() << "built without NCCL";
  std::unique_ptr<Communicator> comm;
  try {
    comm = create_nccl_communicator(MPI_COMM_WORLD, group);
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()), "");
    GTEST_SKIP() << "no usable GPU setup: " << e.what();
  }
  EXPECT_STREQ(comm->backend(), "nccl");
  check_collectives(*comm, group);
}

TEST(NcclCommunicator, SingletonWorksOrFailsClearly) { check_nccl_group({world_rank()}); }

TEST(NcclCommunicator, WholeWorldWorksOrFailsClearly) {
  Group everyone(world_size());
  std::iota(everyone.begin(), everyone.end(), 0);
  check_nccl_group(everyone);
}

}  // namespace
}  // namespace minimllm
