# `cmake --install build --prefix P` puts into P:
#   bin/ddprun, bin/train, bin/gpt the launcher and the examples it finds next to itself
#   lib/libddp*.a, ...             the worker library and the static parts it needs
#                                  (libddprun_gloo.a: its private Gloo, with a wheel's LibTorch)
#   include/ddprun/ddp/*.h         its headers (and rendezvous/store/store.h and two channel/ headers, which they include)
#   lib/cmake/ddprun/              ddprunConfig.cmake, its version file and targets
#   share/ddprun/python/ddprun/    the Python package (ddprun.Healer), which the agent puts on
#                                  its Python workers' PYTHONPATH
# so that a project does find_package(ddprun) and links ddprun::worker; the
# config finds Torch (the same way: DDPRUN_PYTHON's wheel, TorchFromPython.cmake),
# Gloo, gRPC, protobuf, nlohmann_json and zlib for it.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DDPRUN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ddprun)
set(DDPRUN_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/ddprun)

# Installed programs keep the paths of libraries outside the system's
# folders (NCCL and the CUDA runtime under /usr/local/cuda).
set_target_properties(train gpt PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON INSTALL_RPATH "${DDPRUN_WHEEL_RPATH}")
set_target_properties(ddp PROPERTIES EXPORT_NAME worker)
set_target_properties(ddp_base PROPERTIES EXPORT_NAME worker_base)
set_target_properties(ddprun_store PROPERTIES EXPORT_NAME store)
set_target_properties(ddprun_channel PROPERTIES EXPORT_NAME channel)
set_target_properties(ddprun_rdzv_client PROPERTIES EXPORT_NAME rdzv_client)
set_target_properties(ddprun_rdzv_auth PROPERTIES EXPORT_NAME rdzv_auth)
set_target_properties(ddprun_proto PROPERTIES EXPORT_NAME proto)
set_target_properties(ddprun_tcpstore PROPERTIES EXPORT_NAME tcpstore)

if(DDPRUN_TOOLS_FROM)
  # The other build's launcher (it links no LibTorch).
  install(PROGRAMS "${DDPRUN_TOOLS_FROM}/ddprun" DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(TARGETS train EXPORT ddprunTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
else()
  set_target_properties(ddprun PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON EXPORT_NAME launcher)
  install(TARGETS ddprun train EXPORT ddprunTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
# gpt is built by `scripts/setup.sh --all` (or `--target gpt`), not by the first command.
install(TARGETS gpt RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} OPTIONAL)
ddprun_install_python_package(${CMAKE_INSTALL_DATADIR}/ddprun/python)
install(TARGETS ddp ddp_base ddprun_store ddprun_channel ddprun_rdzv_client ddprun_rdzv_auth ddprun_proto
                ddprun_tcpstore
        EXPORT ddprunTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${DDPRUN_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/worker_lib/include/ddp DESTINATION ${DDPRUN_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(FILES ${PROJECT_SOURCE_DIR}/rendezvous/store/store.h DESTINATION ${DDPRUN_INSTALL_INCLUDEDIR}/rendezvous/store)
# The agent <-> worker contract headers the public ones include (the heartbeat
# slot with its progress block and flight record, the trace file format).
install(FILES ${PROJECT_SOURCE_DIR}/channel/heartbeat_layout.h ${PROJECT_SOURCE_DIR}/channel/flight_record.h
              ${PROJECT_SOURCE_DIR}/channel/trace_format.h
        DESTINATION ${DDPRUN_INSTALL_INCLUDEDIR}/channel)

# A private Gloo (cmake/Gloo.cmake) travels with the worker library.
if(DDPRUN_PRIVATE_GLOO)
  install(FILES "${DDPRUN_PRIVATE_GLOO_LIBRARY}" DESTINATION ${CMAKE_INSTALL_LIBDIR} RENAME libddprun_gloo.a)
endif()
install(FILES ${CMAKE_CURRENT_LIST_DIR}/TorchFromPython.cmake DESTINATION ${DDPRUN_INSTALL_CMAKEDIR})

install(EXPORT ddprunTargets NAMESPACE ddprun:: DESTINATION ${DDPRUN_INSTALL_CMAKEDIR})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ddprunConfig.cmake.in
  ${CMAKE_BINARY_DIR}/ddprunConfig.cmake INSTALL_DESTINATION ${DDPRUN_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ddprunConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ddprunConfig.cmake ${CMAKE_BINARY_DIR}/ddprunConfigVersion.cmake
        DESTINATION ${DDPRUN_INSTALL_CMAKEDIR})
