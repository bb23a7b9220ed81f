# `cmake --install BUILD --prefix PREFIX`: the minimllm program, the layer libraries (minimllm::core ...
# minimllm::driver, with minimllm::kernels) and their headers (include/minimllm), and a package config, so
# that another project's find_package(minimllm) finds them (tests/install_consumer, scripts/test-install.sh).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MINIMLLM_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/minimllm)
get_property(_minimllm_layers GLOBAL PROPERTY MINIMLLM_LAYER_TARGETS)
set_target_properties(minimllm_hdf5 PROPERTIES EXPORT_NAME hdf5)
install(TARGETS minimllm ${_minimllm_layers} minimllm_hdf5
        EXPORT minimllmTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/minimllm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.hpp")
install(EXPORT minimllmTargets NAMESPACE minimllm:: DESTINATION ${MINIMLLM_INSTALL_CMAKEDIR})

# What the package config must find again where it is used: the libraries' link dependencies.
set(MINIMLLM_WITH_CBC ${CBC_FOUND})
if("CUDA" IN_LIST MINIMLLM_KOKKOS_BACKENDS OR MINIMLLM_ENABLE_NCCL)
  set(MINIMLLM_WITH_CUDA TRUE)
else()
  set(MINIMLLM_WITH_CUDA FALSE)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/minimllmConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/minimllmConfig.cmake
                              INSTALL_DESTINATION ${MINIMLLM_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/minimllmConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/minimllmConfig.cmake ${PROJECT_BINARY_DIR}/minimllmConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/MinimllmKokkosIncludes.cmake
        DESTINATION ${MINIMLLM_INSTALL_CMAKEDIR})
