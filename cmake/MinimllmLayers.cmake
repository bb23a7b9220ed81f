# The layer stack (docs/DESIGN.md, "Layers"): one library per folder, each linking only layers below it.
#
#   core -> kernels -> config -> metrics -> data -> plan -> parallel -> model -> step -> driver
#
# Enforced by the build: library minimllm_<layer> exposes only include/minimllm/<layer>/ (through a link
# in the build tree, build/layers/<layer>/minimllm/<layer>), so a file sees its own layer's headers and
# those of the layers it links, and an #include of a layer above fails to compile.

# minimllm_layer(<layer> SOURCES file... [PUBLIC lib...] [PRIVATE lib...])
function(minimllm_layer layer)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;PUBLIC;PRIVATE")
  set(root ${PROJECT_BINARY_DIR}/layers/${layer})
  file(MAKE_DIRECTORY ${root}/minimllm)
  if(NOT EXISTS ${root}/minimllm/${layer})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/include/minimllm/${layer} ${root}/minimllm/${layer} SYMBOLIC)
  endif()
  add_library(minimllm_${layer} ${arg_SOURCES})
  target_include_directories(minimllm_${layer} PUBLIC ${root})
  target_link_libraries(minimllm_${layer} PUBLIC minimllm_flags ${arg_PUBLIC} PRIVATE ${arg_PRIVATE})
endfunction()
