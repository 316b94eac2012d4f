#include "rendezvous/server/nccl_unique_id.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>

namespace ddprun {
namespace {

constexpr size_t kNcclUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES in nccl.h
using GetUniqueIdFn = int (*)(void* id);
using GetErrorStringFn = const char* (*)(int result);

struct NcclLib {
  GetUniqueIdFn get_unique_id = nullptr;
  GetErrorStringFn get_error_string = nullptr;
  std::string error;
};

const NcclLib& nccl_lib() {
  static NcclLib lib;
  static std::once_flag once;
  std::call_once(once, [] {
    // The soname first (what an installed NCCL provides), then the CUDA
    // toolkit's copy for machines where it is not on the loader's path.
    const char* candidates[] = {"libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
                                "/usr/local/cuda/lib/libnccl.so.2"};
    void* handle = nullptr;
    std::string errors;
    for (const char* name : candidates) {
      handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (handle) break;
      errors += std::string(dlerror()) + "; ";
    }
    if (!handle) {
      lib.error = "cannot load libnccl.so.2 (" + errors + "set LD_LIBRARY_PATH to NCCL's lib folder)";
      return;
    }
    lib.get_unique_id = reinterpret_cast<GetUniqueIdFn>(dlsym(handle, "ncclGetUniqueId"));
    lib.get_error_string = reinterpret_cast<GetErrorStringFn>(dlsym(handle, "ncclGetErrorString"));
    if (!lib.get_unique_id) lib.error = "libnccl.so.2 has no ncclGetUniqueId";
  });
  return lib;
}

}  // namespace

std::string make_nccl_unique_id() {
  const NcclLib& lib = nccl_lib();
  if (!lib.get_unique_id) throw std::runtime_error(lib.error);
  std::string id(kNcclUniqueIdBytes, '\0');
  int rc = lib.get_unique_id(id.data());
  if (rc != 0) {
    std::string why = lib.get_error_string ? lib.get_error_string(rc) : "error " + std::to_string(rc);
    throw std::runtime_error("ncclGetUniqueId failed: " + why);
  }
  return id;
}

}  // namespace ddprun
