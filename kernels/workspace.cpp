#include "minimllm/kernels/workspace.hpp"

#include <algorithm>
#include <cstdint>

namespace minimllm {
namespace {

constexpr std::size_t kAlignFloats = 64;  // 256 bytes: cuBLAS's preferred alignment, whole cache lines
static_assert(sizeof(float) * kAlignFloats == 256, "256-byte blocks");
Workspace* g_active = nullptr;  // one host thread drives Kokkos

}  // namespace

Workspace* detail::active_workspace() { return g_active; }

void* Workspace::take(std::size_t bytes) {
  const std::size_t count = (bytes + sizeof(float) - 1) / sizeof(float);
  const std::size_t size = (count + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  need_ += size;
  high_water_ = std::max(high_water_, need_);
  if (top_ + size <= capacity_) {
    float* data = base_ + top_;
    top_ += size;
    return data;
  }
  overflow_.emplace_back(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("workspace::overflow")),
                         size);
  ++overflow_allocations_;
  return overflow_.back().data();
}

void Workspace::settle() {
  if (high_water_ > capacity_) {
    arena_ = t_vec();  // freed first, so the old and new arenas never coexist
    arena_ = t_vec(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("workspace::arena")),
                   high_water_ + kAlignFloats);
    const auto address = reinterpret_cast<std::uintptr_t>(arena_.data());
    const std::size_t skip = (256 - address % 256) % 256 / sizeof(float);
    base_ = arena_.data() + skip;
    capacity_ = arena_.extent(0) - skip;
    ++arena_allocations_;
  }
}

WorkspaceScope::WorkspaceScope(Workspace& workspace) : workspace_(&workspace), previous_active_(g_active) {
  top_mark_ = workspace_->top_;
  need_mark_ = workspace_->need_;
  overflow_mark_ = workspace_->overflow_.size();
  ++workspace_->depth_;
  g_active = workspace_;
}

WorkspaceScope::WorkspaceScope() : workspace_(g_active), previous_active_(g_active) {
  if (!workspace_) return;
  top_mark_ = workspace_->top_;
  need_mark_ = workspace_->need_;
  overflow_mark_ = workspace_->overflow_.size();
  ++workspace_->depth_;
}

WorkspaceScope::~WorkspaceScope() {
  if (!workspace_) return;
  workspace_->top_ = top_mark_;
  workspace_->need_ = need_mark_;
  workspace_->overflow_.resize(overflow_mark_);  // frees what this scope took beyond the arena
  if (--workspace_->depth_ == 0) workspace_->settle();
  g_active = previous_active_;
}

}  // namespace minimllm
