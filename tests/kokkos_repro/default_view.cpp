// Minimal reproducer (docs/PORTABILITY.md): with the Kokkos 4.6.99 development snapshot (28848dfa, the
// mdspan-based View by default) built by GCC 12.2, a default-constructed View has its allocation tracker
// zeroed instead of "no allocation" (DO_NOT_DEREF_FLAG), so destroying it, or move-assigning another View
// to it, calls SharedAllocationRecord::decrement(nullptr): SIGSEGV. Kokkos 3.4 and 4.6.01 run it, as does
// clang 14 with the same snapshot. Nothing is allocated, so Kokkos need not be initialised (any backend).
// Exit 0 and "PASS" when default Views behave; a crash otherwise.
#include <Kokkos_Core.hpp>
#include <cstdio>

namespace {
void step(const char* what) {
  std::printf("%s\n", what);
  std::fflush(stdout);  // the last line printed names the step that crashed
}
}  // namespace

int main() {
  using View = Kokkos::View<float*, Kokkos::HostSpace>;
  {
    step("default-construct a View");
    View a;
    step("move-assign a default-constructed View to it");
    a = View();
    step("destroy it");
  }
  std::printf("PASS: default-constructed Views (Kokkos %d)\n", KOKKOS_VERSION);
  return 0;
}
