# LibTorch from a Python's PyTorch (a PyPI wheel), the LibTorch most users
# already have:
#
#   cmake -S . -B build-torch2 -DDDPRUN_PYTHON=/path/to/venv/bin/python
#
# or configure with a virtual environment active (VIRTUAL_ENV) whose python
# imports torch. Points find_package(Torch) at torch.utils.cmake_prefix_path.
#
# A CUDA wheel's CMake config (Caffe2's cuda.cmake) insists on a CUDA
# toolkit with nvcc, although nothing of ours is CUDA source. Where
# DDPRUN_CUDA_ROOT (/usr/local/cuda) has none, a toolkit folder is put
# together under the build folder from the wheel's own nvidia-* packages
# (which must include nvidia-cuda-nvcc; compiling needs no GPU), and NCCL is
# the wheel's (nvidia-nccl): the one libtorch_cuda loads, so the process has
# one NCCL.
#
# Sets DDPRUN_TORCH_FROM_PYTHON (the torch version) when it did anything.
# ddprun's installed package runs it too, so that a project doing
# find_package(ddprun) finds the same LibTorch the same way.

if(NOT DEFINED DDPRUN_CUDA_ROOT)
  set(DDPRUN_CUDA_ROOT "/usr/local/cuda")
endif()
set(DDPRUN_PYTHON "" CACHE FILEPATH
    "A Python whose PyTorch (pip's wheel) gives LibTorch; empty: the active venv's if it has torch, else find_package(Torch) as usual")

if(NOT DDPRUN_PYTHON AND DEFINED ENV{VIRTUAL_ENV} AND EXISTS "$ENV{VIRTUAL_ENV}/bin/python")
  execute_process(COMMAND "$ENV{VIRTUAL_ENV}/bin/python" -c "import torch"
                  RESULT_VARIABLE _venv_has_torch OUTPUT_QUIET ERROR_QUIET)
  if(_venv_has_torch EQUAL 0)
    set(DDPRUN_PYTHON "$ENV{VIRTUAL_ENV}/bin/python" CACHE FILEPATH "" FORCE)
    message(STATUS "ddprun: LibTorch from the active venv's PyTorch ($ENV{VIRTUAL_ENV})")
  endif()
endif()
if(NOT DDPRUN_PYTHON)
  return()
endif()

# One line per fact; the torch import's warnings (no numpy...) go to stderr.
set(_ask [=[
import os, torch, torch.utils
def package_dir(name):
    try:
        m = __import__(name, fromlist=["_"])
        return list(m.__path__)[0]
    except Exception:
        return ""
print(torch.utils.cmake_prefix_path)
print(torch.__version__)
print(torch.version.cuda or "")
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(package_dir("nvidia"))
]=])
execute_process(COMMAND "${DDPRUN_PYTHON}" -c "${_ask}"
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _rc EQUAL 0)
  string(REGEX REPLACE ".*\n([^\n]+)\n?$" "\\1" _last "${_err}")
  message(FATAL_ERROR "ddprun: DDPRUN_PYTHON=${DDPRUN_PYTHON} cannot import torch (${_last}); "
                      "give a Python with PyTorch (python -m pip install torch) or leave DDPRUN_PYTHON empty")
endif()
string(REPLACE "\n" ";" _facts "${_out}")
list(GET _facts 0 _prefix)
list(GET _facts 1 _version)
list(GET _facts 2 _cuda)
list(GET _facts 3 _abi)
list(GET _facts 4 _nvidia)
if(NOT _abi EQUAL 1)
  message(FATAL_ERROR "ddprun: PyTorch ${_version} (${DDPRUN_PYTHON}) is built with _GLIBCXX_USE_CXX11_ABI=0; "
                      "ddprun links Debian's gRPC and spdlog, built with the new ABI: use PyTorch 2.7 or later")
endif()
# Torch's config looks for Caffe2's with PATHS, which come after the
# system's folders: Debian's Caffe2 (1.13) would win over the wheel's.
set(Torch_DIR "${_prefix}/Torch" CACHE PATH "LibTorch's CMake config (from DDPRUN_PYTHON)" FORCE)
set(Caffe2_DIR "${_prefix}/Caffe2" CACHE PATH "LibTorch's Caffe2 config (from DDPRUN_PYTHON)" FORCE)
# Its libraries likewise: TorchConfig's find_library calls name the wheel's
# lib/ in PATHS, which come after the system's folders, so Debian's
# libtorch.so and libc10.so (1.13) were linked while the wheel's were loaded.
# The wheel's root first on CMAKE_PREFIX_PATH puts its lib/ before them; a
# cache from before that forgets what it found elsewhere.
get_filename_component(DDPRUN_TORCH_ROOT "${_prefix}/../.." ABSOLUTE)
list(PREPEND CMAKE_PREFIX_PATH "${_prefix}" "${DDPRUN_TORCH_ROOT}")
get_cmake_property(_cached CACHE_VARIABLES)
foreach(_var IN LISTS _cached)
  string(FIND "${${_var}}" "${DDPRUN_TORCH_ROOT}/" _at)
  if(_var MATCHES "^(TORCH|c10|C10_CUDA|CAFFE2_NVRTC|torch_[a-z_]+|c10_[a-z_]+|kineto)_LIBRARY$"
     AND NOT _at EQUAL 0)
    unset(${_var} CACHE)
  endif()
endforeach()
set(DDPRUN_TORCH_FROM_PYTHON "${_version}")

# After find_package(Torch): every library it found is the wheel's.
function(ddprun_check_torch_from_python)
  foreach(_var TORCH_LIBRARY c10_LIBRARY)
    string(FIND "${${_var}}" "${DDPRUN_TORCH_ROOT}/" _at)
    if(DEFINED ${_var} AND NOT _at EQUAL 0)
      message(FATAL_ERROR "ddprun: ${_var} is ${${_var}}, not the wheel's (${DDPRUN_TORCH_ROOT}/lib): "
                          "one program would link one LibTorch and load another; remove it from the cache "
                          "(cmake -U ${_var}) or set it to the wheel's")
    endif()
  endforeach()
endfunction()
# Where installed programs find the wheel's libraries (CMake leaves link
# folders inside the project, such as a venv in the build folder, out of
# INSTALL_RPATH_USE_LINK_PATH).
get_filename_component(_torch_lib "${_prefix}/../../lib" ABSOLUTE)
set(DDPRUN_WHEEL_RPATH "${_torch_lib}")
foreach(_sub cu13 nccl cuda_runtime)
  if(EXISTS "${_nvidia}/${_sub}/lib")
    list(APPEND DDPRUN_WHEEL_RPATH "${_nvidia}/${_sub}/lib")
  endif()
endforeach()
message(STATUS "ddprun: LibTorch ${_version} from ${DDPRUN_PYTHON} (${Torch_DIR})")

if(_cuda STREQUAL "")
  return()
endif()

# NCCL: the wheel's, unless one was given.
if(NOT DDPRUN_NCCL_ROOT AND EXISTS "${_nvidia}/nccl/include/nccl.h")
  set(DDPRUN_NCCL_ROOT "${_nvidia}/nccl")
endif()
if(EXISTS "${DDPRUN_CUDA_ROOT}/bin/nvcc")
  set(CUDA_TOOLKIT_ROOT_DIR "${DDPRUN_CUDA_ROOT}" CACHE PATH "")
  return()
endif()

# A toolkit folder from the wheel's packages: bin/ and nvvm/ of the package
# that has nvcc, include/ and lib/ merged from every nvidia-* package (with
# the unversioned library names FindCUDA looks for: libcudart.so ->
# libcudart.so.13).
file(GLOB _nvcc "${_nvidia}/*/bin/nvcc")
if(NOT _nvcc)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" _cuda_mm "${_cuda}")
  message(FATAL_ERROR
    "ddprun: PyTorch ${_version} (${DDPRUN_PYTHON}) is built with CUDA ${_cuda}, and its CMake config "
    "needs a CUDA compiler, which neither DDPRUN_CUDA_ROOT=${DDPRUN_CUDA_ROOT} nor the wheel's nvidia "
    "packages have. Install the CUDA toolkit there, or the compiler into that Python (no GPU needed): "
    "${DDPRUN_PYTHON} -m pip install \"nvidia-cuda-nvcc==${_cuda_mm}.*\" \"nvidia-cuda-crt==${_cuda_mm}.*\" "
    "\"nvidia-nvvm==${_cuda_mm}.*\"")
endif()
list(GET _nvcc 0 _nvcc)
get_filename_component(_top "${_nvcc}" DIRECTORY)
get_filename_component(_top "${_top}" DIRECTORY)
set(_kit "${CMAKE_BINARY_DIR}/wheel-cuda")
file(REMOVE_RECURSE "${_kit}")
file(MAKE_DIRECTORY "${_kit}/lib" "${_kit}/include")
file(CREATE_LINK "${_top}/bin" "${_kit}/bin" SYMBOLIC)
if(EXISTS "${_top}/nvvm")
  file(CREATE_LINK "${_top}/nvvm" "${_kit}/nvvm" SYMBOLIC)
endif()
file(CREATE_LINK "lib" "${_kit}/lib64" SYMBOLIC)
file(GLOB _packages LIST_DIRECTORIES true "${_nvidia}/*")
list(REMOVE_ITEM _packages "${_top}")
list(PREPEND _packages "${_top}")  # the compiler's own headers first
foreach(_pkg IN LISTS _packages)
  file(GLOB _entries LIST_DIRECTORIES true "${_pkg}/include/*")
  foreach(_e IN LISTS _entries)
    get_filename_component(_name "${_e}" NAME)
    if(NOT EXISTS "${_kit}/include/${_name}")
      file(CREATE_LINK "${_e}" "${_kit}/include/${_name}" SYMBOLIC)
    endif()
  endforeach()
  file(GLOB _libs "${_pkg}/lib/*")
  foreach(_l IN LISTS _libs)
    get_filename_component(_name "${_l}" NAME)
    if(NOT EXISTS "${_kit}/lib/${_name}")
      file(CREATE_LINK "${_l}" "${_kit}/lib/${_name}" SYMBOLIC)
    endif()
    if(_name MATCHES "^(lib[^.]+)\\.so\\.[0-9.]+$")
      set(_unversioned "${_kit}/lib/${CMAKE_MATCH_1}.so")
      if(NOT EXISTS "${_unversioned}")
        file(CREATE_LINK "${_l}" "${_unversioned}" SYMBOLIC)
      endif()
    endif()
  endforeach()
endforeach()
# nvcc finds its own libraries through its real folder's lib64/, which the
# CUDA 13.0 wheels (one nvidia/cu13 folder) lack: CMake's check that nvcc
# links would fail on cudadevrt. Point it at the kit's lib/ (CUDAFLAGS is
# where CMake takes the CUDA flags' first value from).
if(NOT EXISTS "${_top}/lib64" AND NOT "$ENV{CUDAFLAGS}" MATCHES "-L")
  set(ENV{CUDAFLAGS} "$ENV{CUDAFLAGS} -L${_kit}/lib")
endif()
set(CUDA_TOOLKIT_ROOT_DIR "${_kit}" CACHE PATH "" FORCE)
set(CMAKE_CUDA_COMPILER "${_kit}/bin/nvcc" CACHE FILEPATH "" FORCE)
set(DDPRUN_CUDA_ROOT "${_kit}")
# Caffe2's config sets CUDA's standard to C++'s (20), which CMake before
# 3.27 cannot ask of nvcc; no source of ours is CUDA, and 17 satisfies it.
if(NOT DEFINED CMAKE_CUDA_STANDARD AND CMAKE_VERSION VERSION_LESS 3.27)
  set(CMAKE_CUDA_STANDARD 17)
endif()
message(STATUS "ddprun: CUDA ${_cuda} toolkit from the wheel's nvidia packages in ${_kit}")
