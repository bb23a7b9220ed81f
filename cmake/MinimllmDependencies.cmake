# Finds every dependency once; targets are used by kernels/, src/, tests/ and benchmarks/.

# Kokkos 3.4 (Debian) or any 3.4-4.x selected with Kokkos_ROOT.
find_package(Kokkos REQUIRED)
# Debian's 3.4.01 config names a non-existent include dir (<prefix>/include); point it at the real one.
include(MinimllmKokkosIncludes)
minimllm_fix_kokkos_includes()
set(MINIMLLM_KOKKOS_BACKENDS "")
foreach(_backend IN ITEMS SERIAL OPENMP CUDA HIP THREADS)
  kokkos_check(DEVICES ${_backend} RETURN_VALUE _has_backend)
  if(_has_backend)
    list(APPEND MINIMLLM_KOKKOS_BACKENDS ${_backend})
  endif()
endforeach()
message(STATUS "minimllm: Kokkos ${Kokkos_VERSION} backends: ${MINIMLLM_KOKKOS_BACKENDS}")
# GCC 12.2-12.x with the Kokkos View of 4.6.99 and later (mdspan-based by default) leaves a
# default-constructed View's tracker zeroed, so destroying or assigning it crashes (compiler bug behind
# kokkos/kokkos#7464 and #8187, worked around in Kokkos by #8223; docs/PORTABILITY.md). Run the reproducer
# once on that combination, so a broken Kokkos fails here with the remedies, not in 18 test programs.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12.2
   AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13 AND Kokkos_VERSION VERSION_GREATER_EQUAL 4.6.99
   AND NOT CMAKE_CROSSCOMPILING)
  try_run(_default_view_run _default_view_compiled ${CMAKE_BINARY_DIR}/kokkos_default_view_check
          ${PROJECT_SOURCE_DIR}/tests/kokkos_repro/default_view.cpp
          LINK_LIBRARIES Kokkos::kokkos CXX_STANDARD 17
          COMPILE_OUTPUT_VARIABLE _default_view_compile_output RUN_OUTPUT_VARIABLE _default_view_output)
  if(NOT _default_view_compiled)
    message(WARNING "minimllm: could not build tests/kokkos_repro/default_view.cpp against Kokkos "
                    "${Kokkos_VERSION}; default-constructed Views are unchecked:\n${_default_view_compile_output}")
  elseif(NOT _default_view_run EQUAL 0)
    message(FATAL_ERROR
      "minimllm: Kokkos ${Kokkos_VERSION} compiled by GCC ${CMAKE_CXX_COMPILER_VERSION} crashes on a "
      "default-constructed View (tests/kokkos_repro/default_view.cpp: run result '${_default_view_run}'; a GCC 12 "
      "bug with Kokkos's mdspan-based View, kokkos/kokkos#8187). Use GCC >= 13 or clang, a Kokkos with "
      "kokkos/kokkos#8223, or Kokkos configured with -DKokkos_ENABLE_IMPL_VIEW_LEGACY=ON. See docs/PORTABILITY.md.")
  else()
    message(STATUS "minimllm: default-constructed Views checked (GCC ${CMAKE_CXX_COMPILER_VERSION}, Kokkos ${Kokkos_VERSION})")
  endif()
endif()

find_package(MPI REQUIRED COMPONENTS C CXX)

set(HDF5_PREFER_PARALLEL TRUE)
find_package(HDF5 REQUIRED COMPONENTS C)
if(NOT HDF5_IS_PARALLEL)
  message(FATAL_ERROR "minimllm needs a parallel (MPI) HDF5, but found a serial one (${HDF5_C_INCLUDE_DIRS}). "
                      "Install libhdf5-mpich-dev (Debian/Ubuntu) or point HDF5_ROOT at an MPI build of HDF5.")
endif()
add_library(minimllm_hdf5 INTERFACE)
# SYSTEM, like the imported targets' include directories (Kokkos, MPI, ...): warnings in third-party headers
# are not minimllm's (MINIMLLM_WERROR). Installed as minimllm::hdf5 (cmake/MinimllmInstall.cmake) without
# these paths: the package config fills them in from the HDF5 it finds where it is used.
target_include_directories(minimllm_hdf5 SYSTEM INTERFACE "$<BUILD_INTERFACE:${HDF5_C_INCLUDE_DIRS}>")
target_link_libraries(minimllm_hdf5 INTERFACE "$<BUILD_INTERFACE:${HDF5_C_LIBRARIES}>")
set(_hdf5_definitions ${HDF5_C_DEFINITIONS})
list(TRANSFORM _hdf5_definitions REPLACE "^-D" "")  # as target_compile_definitions would, but inside $<...>
target_compile_definitions(minimllm_hdf5 INTERFACE "$<BUILD_INTERFACE:${_hdf5_definitions}>")

set(BLA_VENDOR OpenBLAS)
find_package(BLAS)
if(NOT BLAS_FOUND)
  unset(BLA_VENDOR)
  find_package(BLAS REQUIRED)
endif()
find_path(MINIMLLM_CBLAS_INCLUDE cblas.h PATH_SUFFIXES openblas openblas-pthread REQUIRED)
find_library(MINIMLLM_OPENBLAS_SET_THREADS NAMES openblas)

# COIN-OR CBC solves flexsp's MILP (src/planning/milp.cpp). Optional: without it flexsp runs its heuristic
# only, and says so in every plan (/plans/solver_status: unavailable). CI requires it.
option(MINIMLLM_REQUIRE_CBC "Stop at configure time when COIN-OR CBC (pkg-config cbc) is missing" OFF)
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(CBC QUIET IMPORTED_TARGET cbc)
endif()
if(CBC_FOUND)
  message(STATUS "minimllm: COIN-OR CBC ${CBC_VERSION}: flexsp solves its MILP")
elseif(MINIMLLM_REQUIRE_CBC)
  message(FATAL_ERROR "minimllm: COIN-OR CBC not found (pkg-config module cbc), and MINIMLLM_REQUIRE_CBC is ON. "
                      "Install coinor-libcbc-dev (Debian/Ubuntu; scripts/setup-deps.sh does) or set PKG_CONFIG_PATH "
                      "to a CBC installation.")
else()
  message(WARNING "minimllm: COIN-OR CBC not found (pkg-config module cbc): flexsp will run its heuristic only, "
                  "without its MILP. Install coinor-libcbc-dev (Debian/Ubuntu; scripts/setup-deps.sh does).")
endif()

find_package(yaml-cpp REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt REQUIRED)

if(MINIMLLM_ENABLE_TESTS)
  find_package(GTest REQUIRED)
endif()
if(MINIMLLM_ENABLE_BENCHMARKS)
  find_package(benchmark REQUIRED)
endif()

# The CUDA backend's GEMM is cuBLAS; NCCL needs the CUDA runtime even on host backends.
if("CUDA" IN_LIST MINIMLLM_KOKKOS_BACKENDS OR MINIMLLM_ENABLE_NCCL)
  find_package(CUDAToolkit REQUIRED)
endif()
if(MINIMLLM_ENABLE_NCCL)
  # Only the header at build time: libnccl.so.2 is loaded at run time (dlopen).
  find_path(MINIMLLM_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
endif()

# Flags every minimllm target shares.
add_library(minimllm_flags INTERFACE)
target_compile_options(minimllm_flags INTERFACE -Wall -Wextra)
if(MINIMLLM_WERROR)
  target_compile_options(minimllm_flags INTERFACE -Werror)
endif()
if(MINIMLLM_ENABLE_NATIVE AND NOT "CUDA" IN_LIST MINIMLLM_KOKKOS_BACKENDS)
  target_compile_options(minimllm_flags INTERFACE -march=native)
endif()
# Sanitizers (scripts/test-sanitize.sh): compiled into minimllm's code and the Kokkos templates it
# instantiates, linked into every program; third-party libraries stay uninstrumented. Frame pointers and
# -g give whole stack traces; an undefined-behaviour report stops the program (else UBSan only prints).
if(MINIMLLM_SANITIZE)
  string(REPLACE "," ";" _sanitizers "${MINIMLLM_SANITIZE}")
  target_compile_options(minimllm_flags INTERFACE -fsanitize=${MINIMLLM_SANITIZE} -fno-omit-frame-pointer -g)
  if("undefined" IN_LIST _sanitizers)
    target_compile_options(minimllm_flags INTERFACE -fno-sanitize-recover=undefined)
  endif()
  target_link_options(minimllm_flags INTERFACE -fsanitize=${MINIMLLM_SANITIZE})
  message(STATUS "minimllm: sanitizers ${MINIMLLM_SANITIZE}")
endif()
