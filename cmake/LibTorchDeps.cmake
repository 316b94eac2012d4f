# What worker_lib, the examples and the tests need: LibTorch, Gloo, ISA-L,
# GoogleTest, NCCL. A launcher-only build (DDPRUN_LAUNCHER_ONLY) skips this.
include(cmake/TorchFromPython.cmake)
find_package(Torch REQUIRED)
if(DDPRUN_TORCH_FROM_PYTHON)
  ddprun_check_torch_from_python()
endif()
include(cmake/Gloo.cmake)
# ISA-L: zlib's crc32 five times faster, for checkpoint checksums. Optional:
# without it zlib computes the same checksum.
find_path(ISAL_INCLUDE_DIR isa-l/crc.h)
find_library(ISAL_LIBRARY isal)
# The tests need GoogleTest (scripts/install-deps.sh tests); the README's
# first command builds no test, so without it they are left out, unless
# DDPRUN_REQUIRE_TESTS (scripts/setup.sh --all, which CI runs) says they
# must be there.
option(DDPRUN_REQUIRE_TESTS "Fail the configure step when the tests cannot be built" OFF)
find_package(GTest QUIET)
if(NOT GTest_FOUND)
  if(DDPRUN_REQUIRE_TESTS)
    message(FATAL_ERROR "ddprun: GoogleTest not found: install libgtest-dev (scripts/install-deps.sh tests)")
  endif()
  message(STATUS "ddprun: no GoogleTest: the tests are not configured (scripts/install-deps.sh tests installs it)")
endif()

# NCCL + CUDA runtime: optional. Without them the NCCL communicator is left
# out and workers use Gloo; the build says so.
set(DDPRUN_HAVE_NCCL OFF)
if(DDPRUN_WITH_NCCL)
  # A wheel's NCCL has only libnccl.so.2 (no libnccl.so), hence both names.
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${DDPRUN_NCCL_ROOT}/include ${DDPRUN_CUDA_ROOT}/include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS ${DDPRUN_NCCL_ROOT}/lib ${DDPRUN_CUDA_ROOT}/lib64 ${DDPRUN_CUDA_ROOT}/lib)
  find_path(CUDART_INCLUDE_DIR cuda_runtime_api.h HINTS ${DDPRUN_CUDA_ROOT}/include)
  find_library(CUDART_LIBRARY cudart HINTS ${DDPRUN_CUDA_ROOT}/lib64 ${DDPRUN_CUDA_ROOT}/lib)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND CUDART_INCLUDE_DIR AND CUDART_LIBRARY)
    set(DDPRUN_HAVE_NCCL ON)
    # CUDA 13 moved CCCL (<nv/target>, which cuda_fp16.h includes) to include/cccl.
    set(DDPRUN_CUDA_INCLUDE_DIRS ${NCCL_INCLUDE_DIR} ${CUDART_INCLUDE_DIR})
    if(EXISTS "${CUDART_INCLUDE_DIR}/cccl/nv/target")
      list(APPEND DDPRUN_CUDA_INCLUDE_DIRS "${CUDART_INCLUDE_DIR}/cccl")
    endif()
    message(STATUS "ddprun: NCCL found (${NCCL_LIBRARY}); the NCCL communicator is built")
  else()
    message(STATUS "ddprun: NCCL or the CUDA runtime not found under ${DDPRUN_CUDA_ROOT}; "
                   "building without the NCCL communicator (CPU/Gloo only)")
  endif()
else()
  message(STATUS "ddprun: DDPRUN_WITH_NCCL=OFF; building without the NCCL communicator")
endif()

# A LibTorch built with CUDA (PyTorch 2.x's, via CMAKE_PREFIX_PATH=
# torch.utils.cmake_prefix_path) brings c10_cuda and its headers; Debian's
# 1.13 is CPU-only. Code that needs c10/cuda checks DDPRUN_TORCH_CUDA.
set(DDPRUN_TORCH_CUDA OFF)
if(TARGET c10_cuda OR TORCH_CUDA_LIBRARIES)
  foreach(dir IN LISTS TORCH_INCLUDE_DIRS)
    if(EXISTS "${dir}/c10/cuda/CUDAStream.h")
      set(DDPRUN_TORCH_CUDA ON)
    endif()
  endforeach()
endif()
message(STATUS "ddprun: LibTorch ${Torch_VERSION}, CUDA in LibTorch: ${DDPRUN_TORCH_CUDA}")
