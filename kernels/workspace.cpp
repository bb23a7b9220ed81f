#include "minimllm/kernels/workspace.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>

namespace minimllm {
namespace {

constexpr std::size_t kAlignFloats = 64;  // 256 bytes: cuBLAS's preferred alignment, whole cache lines
static_assert(sizeof(float) * kAlignFloats == 256, "256-byte blocks");
Workspace* g_active = nullptr;  // one host thread drives Kokkos

std::size_t floats_of(std::size_t bytes) {
  const std::size_t count = (bytes + sizeof(float) - 1) / sizeof(float);
  return (count + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}

}  // namespace

Workspace* detail::active_workspace() { return g_active; }

void* Workspace::take(std::size_t bytes) {
  const std::size_t size = floats_of(bytes);
  float* data = nullptr;
  if (top_ + size <= capacity_) {
    data = base_ + top_;
    top_ += size;
  } else {
    overflow_.emplace_back(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("workspace::overflow")),
        size);  // may throw: the accounting below only counts what was handed out
    data = overflow_.back().data();
    ++overflow_allocations_;
  }
  need_ += size;
  high_water_ = std::max(high_water_, need_);
  return data;
}

void Workspace::reserve(std::size_t bytes) {
  if (depth_ != 0) throw std::logic_error("Workspace::reserve inside an open scope");
  high_water_ = std::max(high_water_, floats_of(bytes));
  grow();
}

void Workspace::grow() {
  if (high_water_ <= capacity_) return;
  // The old arena goes first, so old and new never coexist; a failed allocation leaves an empty one.
  arena_ = t_vec(), base_ = nullptr, capacity_ = 0;
  arena_ = t_vec(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("workspace::arena")),
                 high_water_ + kAlignFloats);
  const auto address = reinterpret_cast<std::uintptr_t>(arena_.data());
  const std::size_t skip = (256 - address % 256) % 256 / sizeof(float);
  base_ = arena_.data() + skip;
  capacity_ = arena_.extent(0) - skip;
  ++arena_allocations_;
}

WorkspaceScope::WorkspaceScope(Workspace& workspace) : WorkspaceScope(&workspace) { g_active = workspace_; }

WorkspaceScope::WorkspaceScope() : WorkspaceScope(g_active) {}

WorkspaceScope::WorkspaceScope(Workspace* workspace) : workspace_(workspace), previous_active_(g_active) {
  if (!workspace_) return;
  top_mark_ = workspace_->top_;
  need_mark_ = workspace_->need_;
  overflow_mark_ = workspace_->overflow_.size();
  depth_ = ++workspace_->depth_;
}

WorkspaceScope::~WorkspaceScope() {
  if (!workspace_) return;
  if (workspace_->depth_ != depth_) {
    // A scope closed before one opened after it: memory still in use would be handed out again.
    std::fprintf(stderr, "minimllm: internal error: workspace scopes closed out of order\n");
    std::abort();
  }
  workspace_->top_ = top_mark_;
  workspace_->need_ = need_mark_;
  workspace_->overflow_.resize(overflow_mark_);  // frees what this scope took beyond the arena
  --workspace_->depth_;
  g_active = previous_active_;
  // The outermost scope grows the arena for the next pass, unless an exception is on its way out (the
  // pass failed; it is reported, not hidden behind a second failure here).
  if (workspace_->depth_ == 0 && std::uncaught_exceptions() == 0) {
    try {
      workspace_->grow();
    } catch (const std::exception&) {
      // Out of memory for a larger arena: the next pass overflows again and fails where it allocates.
    }
  }
}

}  // namespace minimllm
