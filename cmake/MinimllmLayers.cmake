# The layer stack (docs/DESIGN.md, "Layers"): one library per folder, each linking only layers below it.
#
#   core -> kernels -> config -> metrics -> data -> layout -> parallel -> model -> step -> planning -> driver
#
# Enforced by the build: library minimllm_<layer> exposes only include/minimllm/<layer>/ (through a link
# in the build tree, build/layers/<layer>/minimllm/<layer>), so a file sees its own layer's headers and
# those of the layers it links, and an #include of a layer above fails to compile.
# MINIMLLM_CHECK_HEADERS also compiles every public header on its own against its layer, so a header that
# only higher layers include cannot include upward (or miss an include) unnoticed.
include(GNUInstallDirs)  # CMAKE_INSTALL_INCLUDEDIR

option(MINIMLLM_CHECK_HEADERS "Compile each public header alone against its layer's library" OFF)

# minimllm_layer(<layer> SOURCES file... [PUBLIC lib...] [PRIVATE lib...])
function(minimllm_layer layer)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;PUBLIC;PRIVATE")
  set(root ${PROJECT_BINARY_DIR}/layers/${layer})
  set(headers ${PROJECT_SOURCE_DIR}/include/minimllm/${layer})
  set(link ${root}/minimllm/${layer})
  file(MAKE_DIRECTORY ${root}/minimllm)
  if(IS_SYMLINK ${link})
    file(READ_SYMLINK ${link} target)
    if(NOT target STREQUAL headers)  # a build tree moved or copied from another checkout
      file(REMOVE ${link})
    endif()
  endif()
  if(NOT EXISTS ${link})
    file(CREATE_LINK ${headers} ${link} SYMBOLIC)
  endif()
  add_library(minimllm_${layer} ${arg_SOURCES})
  # Installed (cmake/MinimllmInstall.cmake) as minimllm::${layer}, its headers under <prefix>/include; the
  # project's warning, -march=native and sanitizer flags stay with the build.
  target_include_directories(minimllm_${layer} PUBLIC $<BUILD_INTERFACE:${root}>
                                                      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_link_libraries(minimllm_${layer} PUBLIC $<BUILD_INTERFACE:minimllm_flags> ${arg_PUBLIC}
                        PRIVATE ${arg_PRIVATE})
  set_target_properties(minimllm_${layer} PROPERTIES EXPORT_NAME ${layer})
  set_property(GLOBAL APPEND PROPERTY MINIMLLM_LAYER_TARGETS minimllm_${layer})

  if(MINIMLLM_CHECK_HEADERS)
    file(GLOB public_headers RELATIVE ${headers} CONFIGURE_DEPENDS ${headers}/*.hpp)
    set(checks)
    foreach(header IN LISTS public_headers)
      string(REPLACE ".hpp" ".cpp" check ${root}/header_checks/${header})
      file(CONFIGURE OUTPUT ${check} CONTENT "#include \"minimllm/${layer}/${header}\"\n")
      list(APPEND checks ${check})
    endforeach()
    add_library(minimllm_${layer}_header_checks OBJECT ${checks})
    target_link_libraries(minimllm_${layer}_header_checks PRIVATE minimllm_${layer})
  endif()
endfunction()
