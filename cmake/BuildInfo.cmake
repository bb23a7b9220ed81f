# Run at every build (`cmake -P`, from src/CMakeLists.txt): writes OUTPUT, a header with the source
# tree's git revision and dirty flag and the compiler and flags CMake configured, rewriting it only when a
# value changed, so only src/driver/provenance.cpp recompiles. Inputs: SOURCE_DIR, GIT (may be empty),
# OUTPUT, COMPILER, BUILD_TYPE, CXX_FLAGS.
set(revision "unknown")
set(dirty -1)  # unknown: no git, or not a git checkout
if(GIT)
  execute_process(COMMAND ${GIT} rev-parse HEAD WORKING_DIRECTORY ${SOURCE_DIR} RESULT_VARIABLE rc
                  OUTPUT_VARIABLE out ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc EQUAL 0)
    set(revision "${out}")
    # Tracked files only (build directories and scratch files do not make a tree dirty); no index lock.
    execute_process(COMMAND ${GIT} --no-optional-locks status --porcelain --untracked-files=no
                    WORKING_DIRECTORY ${SOURCE_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_QUIET)
    if(rc EQUAL 0)
      if(out STREQUAL "")
        set(dirty 0)
      else()
        set(dirty 1)
      endif()
    endif()
  endif()
endif()
string(REPLACE "\"" "\\\"" CXX_FLAGS "${CXX_FLAGS}")
file(CONFIGURE OUTPUT ${OUTPUT} CONTENT [[
// Generated at build time by cmake/BuildInfo.cmake: do not edit.
#pragma once
#define MINIMLLM_GIT_REVISION "@revision@"
#define MINIMLLM_GIT_DIRTY @dirty@
#define MINIMLLM_COMPILER "@COMPILER@"
#define MINIMLLM_BUILD_TYPE "@BUILD_TYPE@"
#define MINIMLLM_CXX_FLAGS "@CXX_FLAGS@"
]] @ONLY)
