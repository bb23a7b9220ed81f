// The step workspace: nested scopes hand out and release memory last-in-first-out, a need beyond the
// arena is met by a separate allocation and the arena grows to it afterwards, and a repeated pass of
// the same shape then allocates nothing.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>

#include "minimllm/core/allocation_counter.hpp"
#include "minimllm/kernels/loss.hpp"
#include "minimllm/kernels/workspace.hpp"

namespace minimllm {
namespace {

// One "pass": a matrix held throughout, a nested scope with two temporaries, then another temporary
// that reuses the nested scope's memory.
struct PassAddresses {
  const float *held, *inner_a, *inner_b, *after;
};
PassAddresses one_pass(Workspace& workspace, int rows) {
  const WorkspaceScope outer(workspace);
  const t_mat held = scratch_view<t_mat>("held", rows, 8);
  PassAddresses p{held.data(), nullptr, nullptr, nullptr};
  {
    const WorkspaceScope inner;
    const t_mat a = scratch_view<t_mat>("a", rows, 3);
    const t_vec b = scratch_view<t_vec>("b", 5);
    p.inner_a = a.data(), p.inner_b = b.data();
  }
  p.after = scratch_view<t_vec>("after", 7).data();
  return p;
}

TEST(Workspace, ScopesReleaseLastInFirstOutAndTheArenaGrowsToTheNeed) {
  Workspace workspace;
  const PassAddresses first = one_pass(workspace, 10);  // empty arena: every take overflows
  EXPECT_EQ(workspace.overflow_allocations(), 4);
  EXPECT_EQ(workspace.arena_allocations(), 1);
  // held (10 x 8 floats: 320 bytes) + a (10 x 3) + b (5), each rounded up to whole 256-byte blocks
  EXPECT_GE(workspace.capacity_bytes(), 512u + 256u + 256u);
  EXPECT_LE(workspace.capacity_bytes(), 512u + 256u + 256u + 256u) << "at most one block of alignment slack";
  const PassAddresses second = one_pass(workspace, 10);
  EXPECT_EQ(workspace.overflow_allocations(), 4) << "the arena holds a pass of the same shape";
  EXPECT_EQ(workspace.arena_allocations(), 1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(second.held) % 256, 0u);
  EXPECT_EQ(second.inner_a, second.held + 128);
  EXPECT_EQ(second.inner_b, second.inner_a + 64);
  EXPECT_EQ(second.after, second.inner_a) << "the inner scope's memory is reused after it closed";
  (void)first;

  one_pass(workspace, 100);  // larger: overflows once more, then the arena grows
  EXPECT_GT(workspace.overflow_allocations(), 4);
  EXPECT_EQ(workspace.arena_allocations(), 2);
  const std::int64_t overflows = workspace.overflow_allocations();
  std::int64_t allocations = 0;
  {
    const AllocationCounter counter(AllocationCounter::Spaces::mem_space);
    one_pass(workspace, 100);
    one_pass(workspace, 10);
    allocations = counter.count();
  }
  EXPECT_EQ(allocations, 0) << "steady state allocates nothing";
  EXPECT_EQ(workspace.overflow_allocations(), overflows);
}

TEST(Workspace, ReservingBeforeTheFirstPassMeansNoOverflow) {
  Workspace workspace;
  workspace.reserve(100 * 8 * 4 + 100 * 3 * 4 + 5 * 4 + 2 * 256);  // one_pass(100) with its rounding
  EXPECT_EQ(workspace.arena_allocations(), 1);
  one_pass(workspace, 100);
  one_pass(workspace, 10);
  EXPECT_EQ(workspace.overflow_allocations(), 0);
  EXPECT_EQ(workspace.arena_allocations(), 1);
  workspace.reserve(16);  // smaller than the arena: nothing to do
  EXPECT_EQ(workspace.arena_allocations(), 1);
  const WorkspaceScope scope(workspace);
  EXPECT_THROW(workspace.reserve(1 << 20), std::logic_error) << "the arena may be in use";
}

TEST(Workspace, WithoutAnActiveWorkspaceViewsAreOrdinaryAllocations) {
  const t_mat m = scratch_view<t_mat>("plain", 4, 4);
  EXPECT_EQ(m.use_count(), 1) << "a managed view, owned by its holder";
  const WorkspaceScope nothing;  // no workspace active: no effect
  const t_vec v = scratch_view<t_vec>("plain", 3);
  EXPECT_EQ(v.use_count(), 1);
  Workspace workspace;
  {
    const WorkspaceScope scope(workspace);
    EXPECT_EQ(detail::active_workspace(), &workspace);
  }
  EXPECT_EQ(detail::active_workspace(), nullptr) << "closing the scope deactivates the workspace";
}

// Kernels that take their temporaries from the workspace give the same results inside a scope.
TEST(Workspace, KernelTemporariesFromTheArenaGiveTheSameResult) {
  t_vec values("values", 5000);
  Kokkos::deep_copy(values, 0.5f);
  const double outside = sum(values);
  Workspace workspace;
  for (int pass = 0; pass < 3; ++pass) {
    const WorkspaceScope scope(workspace);
    EXPECT_EQ(sum(values), outside);
  }
  EXPECT_EQ(outside, 2500.0);
}

}  // namespace
}  // namespace minimllm
