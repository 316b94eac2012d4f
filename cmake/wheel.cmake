# What the wheel holds (pyproject.toml; scikit-build-core sets SKBUILD and
# the SKBUILD_*_DIR folders), component "wheel":
#   scripts: ddprun    the launcher (auditwheel moves it to
#                      site-packages/ddprun.scripts/ and leaves a wrapper on
#                      the venv's PATH that execs it)
#   platlib: ddprun/   the Python package: importable, and where the agent
#                      finds it for its workers (the program's folder's
#                      parent, agent_setup.cpp), whatever Python runs them
install(TARGETS ddprun RUNTIME DESTINATION "${SKBUILD_SCRIPTS_DIR}" COMPONENT wheel)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/python/ddprun/" DESTINATION "${SKBUILD_PLATLIB_DIR}/ddprun" COMPONENT wheel
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
# The source tree's python/ddprun holds a link to it: the file itself.
install(FILES "${PROJECT_SOURCE_DIR}/channel/heartbeat_layout.h" DESTINATION "${SKBUILD_PLATLIB_DIR}/ddprun"
        COMPONENT wheel)
