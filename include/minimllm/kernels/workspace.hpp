// Reused memory for the temporaries of a training step. Kokkos 3.4 has no memory pool: on CUDA every
// View allocation is a cudaMalloc and every free a device-wide synchronisation, some 170 of each in an
// llm_heavy step. A Workspace is one arena, handed out in nested last-in-first-out scopes and grown,
// between uses, to the largest need seen, so a step in steady state allocates nothing. Reuse is safe on
// a GPU because every kernel reading an arena region runs on Kokkos's stream before the kernels that
// reuse it (cuBLAS shares the stream; collectives on other streams are synchronised before they return).
// The rule: temporaries come from scratch_view inside a WorkspaceScope, the project's one scratch
// mechanism (no static or grow-only Views, which would also outlive Kokkos::finalize). Code that calls
// kernels repeatedly outside a model pass (the measured MFU peak, benchmarks) keeps a Workspace of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "minimllm/core/types.hpp"

namespace minimllm {

class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // `bytes` of uninitialised memory in the innermost open scope (256-byte aligned in the arena); beyond
  // the arena's capacity, a separate allocation, freed when that scope closes. Use scratch_view.
  void* take(std::size_t bytes);

  // Grows the arena to at least `bytes` now, outside any scope (a pass larger than any before would
  // otherwise hold the old arena and its own overflow at once). Throws std::logic_error inside a scope.
  void reserve(std::size_t bytes);

  std::size_t capacity_bytes() const { return capacity_ * sizeof(float); }
  std::int64_t arena_allocations() const { return arena_allocations_; }
  std::int64_t overflow_allocations() const { return overflow_allocations_; }

 private:
  friend class WorkspaceScope;
  void grow();  // the arena to the high-water mark, between passes

  t_vec arena_;                 // floats, as the unit of storage: every request rounds to 256 bytes
  float* base_ = nullptr;       // the arena's first 256-byte boundary (Kokkos aligns to 128 only)
  std::size_t capacity_ = 0;    // floats from base_
  std::size_t top_ = 0;         // floats of the arena in use
  std::size_t need_ = 0;        // floats in use, overflow included: what the arena would have to hold
  std::size_t high_water_ = 0;  // the largest need_ so far
  int depth_ = 0;               // open scopes
  std::vector<t_vec> overflow_;
  std::int64_t arena_allocations_ = 0, overflow_allocations_ = 0;
};

// A scope of a workspace: what is taken inside it is released when it closes. The first form opens a
// scope on `workspace` and makes it the active one (for scratch_view) until it closes; the second opens
// a scope on the active workspace, or does nothing when none is active.
class WorkspaceScope {
 public:
  explicit WorkspaceScope(Workspace& workspace);
  WorkspaceScope();
  ~WorkspaceScope();
  WorkspaceScope(const WorkspaceScope&) = delete;
  WorkspaceScope& operator=(const WorkspaceScope&) = delete;

 private:
  explicit WorkspaceScope(Workspace* workspace);  // null: no effect

  Workspace* workspace_;
  Workspace* previous_active_;
  std::size_t top_mark_ = 0, need_mark_ = 0, overflow_mark_ = 0;
  int depth_ = 0;  // this scope's nesting depth: scopes must close in reverse order
};

namespace detail {
Workspace* active_workspace();
}

// An uninitialised View (of MemSpace, contiguous) with the given runtime extents: from the active
// workspace, valid until the innermost open scope closes; a fresh allocation (labelled) when no workspace
// is active.
template <class ViewType, class... Extents>
ViewType scratch_view(const char* label, Extents... extents) {
  using Value = typename ViewType::value_type;
  static_assert(std::is_trivially_copyable<Value>::value, "workspace views hold plain numbers");
  static_assert(std::is_same<typename ViewType::memory_space, MemSpace>::value,
                "workspace memory is MemSpace");
  static_assert(ViewType::rank_dynamic == sizeof...(Extents), "every extent is a runtime one");
  if (Workspace* workspace = detail::active_workspace()) {
    std::size_t count = 1;
    for (const std::size_t extent : {std::size_t{1}, static_cast<std::size_t>(extents)...}) count *= extent;
    return ViewType(static_cast<Value*>(workspace->take(count * sizeof(Value))), extents...);
  }
  return ViewType(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), extents...);
}

}  // namespace minimllm
