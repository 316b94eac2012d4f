# The Python package (python/ddprun) beside the programs, where the agent
# finds it for its Python workers (bin/../python); installed under
# share/ddprun/python (cmake/install.cmake).
file(GLOB DDPRUN_PYTHON_FILES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/python/ddprun/*.py")
foreach(file ${DDPRUN_PYTHON_FILES})
  get_filename_component(name "${file}" NAME)
  configure_file("${file}" "${CMAKE_BINARY_DIR}/python/ddprun/${name}" COPYONLY)
endforeach()
# The contract with the agent, which _contract.py reads (one definition for
# C++ and Python; the source tree's python/ddprun holds links to them): the
# heartbeat slot's layout, the environment variables' names, the heal vote's words.
set(DDPRUN_PYTHON_CONTRACT "${PROJECT_SOURCE_DIR}/channel/heartbeat_layout.h" "${PROJECT_SOURCE_DIR}/channel/env_names.h"
    "${PROJECT_SOURCE_DIR}/channel/heal_vote.h")
foreach(file ${DDPRUN_PYTHON_CONTRACT})
  get_filename_component(name "${file}" NAME)
  configure_file("${file}" "${CMAKE_BINARY_DIR}/python/ddprun/${name}" COPYONLY)
endforeach()

# Installs the package into DEST/ddprun (an install's share/ddprun/python,
# a wheel's site-packages): its .py files, and the contract's headers
# themselves where the source tree holds links to them. COMPONENT: the install
# component (the wheel's is "wheel").
function(ddprun_install_python_package dest)
  cmake_parse_arguments(arg "" "COMPONENT" "" ${ARGN})
  set(component)
  if(arg_COMPONENT)
    set(component COMPONENT ${arg_COMPONENT})
  endif()
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/python/ddprun/" DESTINATION "${dest}/ddprun" ${component}
          FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
  install(FILES ${DDPRUN_PYTHON_CONTRACT} DESTINATION "${dest}/ddprun" ${component})
endfunction()
