# Which Gloo worker_lib's Gloo communicator uses. A process must hold one
# Gloo, or two that can never be mixed up:
#
# - Debian's LibTorch links Debian's libgloo.so: worker_lib links it too, and
#   the process has one Gloo, shared.
# - A PyPI wheel's libtorch_cpu.so carries its own Gloo, built in and
#   exported (about 500 gloo:: symbols; a 2025-26 commit whose headers the
#   wheel does not ship). Linking Debian's libgloo.so beside it would give
#   the process two Gloos of different layouts, each call bound to whichever
#   the loader meets first. So then worker_lib builds a Gloo of its own from
#   source (Debian 13's, pinned by its hash) into a static library whose
#   symbols are hidden, linked ahead of LibTorch: the communicator's calls
#   bind to it when the program is linked (a mistake is a link error, see
#   gloo_communicator.cpp), nothing of it is exported, and LibTorch's Gloo
#   stays LibTorch's. tests/unit/one_copy_test.cpp checks a running worker.
#
# DDPRUN_GLOO: auto (as above), system (Debian's libgloo.so) or private.
# Sets DDPRUN_GLOO_TARGET (what ddp links) and DDPRUN_PRIVATE_GLOO.

set(DDPRUN_GLOO "auto" CACHE STRING "Gloo for worker_lib: auto, system (libgloo.so) or private (built from source, hidden)")
set(DDPRUN_GLOO_SOURCE
    "http://deb.debian.org/debian/pool/main/g/gloo/gloo_0.0%7Egit20231202.5354032.orig.tar.xz"
    CACHE STRING "Where the private Gloo's source comes from (a URL or a local tarball)")
set(DDPRUN_GLOO_SOURCE_SHA256 "66d6fadb7b07cfcff08f74ae2acfab504e780d6b7536ee74d2011718cda25030"
    CACHE STRING "The SHA-256 of DDPRUN_GLOO_SOURCE")

# Whether the LibTorch found exports Gloo's symbols itself.
function(ddprun_torch_carries_gloo out)
  set(${out} OFF PARENT_SCOPE)
  if(NOT TARGET torch_cpu)
    return()
  endif()
  foreach(prop IMPORTED_LOCATION IMPORTED_LOCATION_RELEASE IMPORTED_LOCATION_RELWITHDEBINFO
               IMPORTED_LOCATION_NOCONFIG IMPORTED_LOCATION_DEBUG)
    get_target_property(lib torch_cpu ${prop})
    if(lib)
      break()
    endif()
  endforeach()
  if(NOT lib OR NOT CMAKE_NM)
    return()
  endif()
  execute_process(COMMAND ${CMAKE_NM} -D --defined-only "${lib}" OUTPUT_VARIABLE syms ERROR_QUIET)
  string(FIND "${syms}" " _ZN4gloo" at)
  if(at GREATER -1)
    set(${out} ON PARENT_SCOPE)
  endif()
endfunction()

set(_mode "${DDPRUN_GLOO}")
if(_mode STREQUAL "auto")
  ddprun_torch_carries_gloo(_carries)
  set(_mode system)
  if(_carries)
    set(_mode private)
  endif()
elseif(NOT _mode MATCHES "^(system|private)$")
  message(FATAL_ERROR "ddprun: DDPRUN_GLOO=${DDPRUN_GLOO}: expected auto, system or private")
endif()

if(_mode STREQUAL "system")
  find_package(Gloo REQUIRED PATHS /usr/share/cmake/Gloo)
  set(DDPRUN_GLOO_TARGET gloo)
  set(DDPRUN_PRIVATE_GLOO OFF)
  message(STATUS "ddprun: Gloo: the system's shared libgloo")
  return()
endif()

include(ExternalProject)
set(_prefix "${CMAKE_BINARY_DIR}/gloo-private")
set(_lib "${_prefix}/lib/libgloo.a")
ExternalProject_Add(gloo_private_build
  URL "${DDPRUN_GLOO_SOURCE}"
  URL_HASH SHA256=${DDPRUN_GLOO_SOURCE_SHA256}
  DOWNLOAD_EXTRACT_TIMESTAMP ON
  PREFIX "${CMAKE_BINARY_DIR}/gloo-private-build"
  CMAKE_GENERATOR ${CMAKE_GENERATOR}
  CMAKE_ARGS -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=${_prefix} -DCMAKE_INSTALL_LIBDIR=lib
             -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
             -DCMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER}
             -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON
             -DUSE_REDIS=OFF -DUSE_IBVERBS=OFF -DUSE_NCCL=OFF -DUSE_RCCL=OFF -DUSE_LIBUV=OFF
             -DUSE_MPI=OFF -DUSE_CUDA=OFF -DUSE_TCP_OPENSSL_LINK=OFF -DUSE_TCP_OPENSSL_LOAD=OFF
             -DBUILD_TEST=OFF -DBUILD_BENCHMARK=OFF
             # CMake 4 refuses Gloo's old cmake_minimum_required without it.
             -DCMAKE_POLICY_VERSION_MINIMUM=3.5
             # Hidden: Gloo's CMake predates CMP0063, so a visibility preset
             # would not reach its static library; the flags do.
             "-DCMAKE_CXX_FLAGS=-w -fvisibility=hidden -fvisibility-inlines-hidden"
  BUILD_BYPRODUCTS "${_lib}")
file(MAKE_DIRECTORY "${_prefix}/include")
add_library(ddprun::gloo STATIC IMPORTED GLOBAL)
set_target_properties(ddprun::gloo PROPERTIES IMPORTED_LOCATION "${_lib}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${_prefix}/include"
                                              INTERFACE_LINK_LIBRARIES Threads::Threads)
add_dependencies(ddprun::gloo gloo_private_build)
set(DDPRUN_GLOO_TARGET ddprun::gloo)
set(DDPRUN_PRIVATE_GLOO ON)
set(DDPRUN_PRIVATE_GLOO_LIBRARY "${_lib}")
message(STATUS "ddprun: Gloo: a private static copy (LibTorch exports a Gloo of its own), from ${DDPRUN_GLOO_SOURCE}")
