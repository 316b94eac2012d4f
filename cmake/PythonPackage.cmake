# The Python package (python/ddprun) beside the programs, where the agent
# finds it for its Python workers (bin/../python); installed under
# share/ddprun/python (cmake/install.cmake).
file(GLOB DDPRUN_PYTHON_FILES CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/python/ddprun/*.py")
foreach(file ${DDPRUN_PYTHON_FILES})
  get_filename_component(name "${file}" NAME)
  configure_file("${file}" "${CMAKE_BINARY_DIR}/python/ddprun/${name}" COPYONLY)
endforeach()
# The heartbeat slot's layout, which _slot.py reads (one definition for C++
# and Python; the source tree's python/ddprun holds a link to it).
configure_file("${PROJECT_SOURCE_DIR}/channel/heartbeat_layout.h" "${CMAKE_BINARY_DIR}/python/ddprun/heartbeat_layout.h"
               COPYONLY)
