# What the wheel holds (pyproject.toml; scikit-build-core sets SKBUILD and
# the SKBUILD_*_DIR folders), component "wheel":
#   scripts: ddprun    the launcher (auditwheel moves it to
#                      site-packages/ddprun.scripts/ and leaves a wrapper on
#                      the venv's PATH that execs it)
#   platlib: ddprun/   the Python package: importable, and where the agent
#                      finds it for its workers (the program's folder's
#                      parent, agent_setup.cpp), whatever Python runs them
install(TARGETS ddprun RUNTIME DESTINATION "${SKBUILD_SCRIPTS_DIR}" COMPONENT wheel)
ddprun_install_python_package("${SKBUILD_PLATLIB_DIR}" COMPONENT wheel)
