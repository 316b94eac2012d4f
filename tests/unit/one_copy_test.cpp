// One copy of each library in a worker process. A PyPI wheel's libtorch_cpu
// carries its own Gloo (and protobuf, fmt...): were a second copy loaded
// beside it (Debian's libgloo.so), every call would bind to whichever the
// loader met first, mixing two layouts. This test is a worker: it links
// worker_lib like any training program, uses LibTorch and a Gloo
// communicator, then reads the dynamic symbol table of every object loaded
// and checks that no function of those libraries is exported twice, and
// that with ddprun's private Gloo (cmake/Gloo.cmake) the program imports
// no Gloo symbol at all.
#include <gtest/gtest.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "comm/gloo_communicator.h"
#include "ddp/ddp.h"
#include "rendezvous/store/memory_store.h"

namespace {

using namespace std::chrono_literals;

struct Symbol {
  std::string name;
  bool defined = false;
  bool strong_function = false;  // a global (not weak) function, visible outside its object
};

// The .dynsym entries of the ELF file at path; empty when it cannot be read.
std::vector<Symbol> dynamic_symbols(const std::string& path) {
  std::vector<Symbol> out;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Elf64_Ehdr))) {
    close(fd);
    return out;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return out;
  const auto* base = static_cast<const unsigned char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  const bool elf64 = std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELFCLASS64;
  if (elf64 && eh->e_shoff != 0 && eh->e_shoff + eh->e_shnum * sizeof(Elf64_Shdr) <= size) {
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; ++i) {
      if (sh[i].sh_type != SHT_DYNSYM || sh[i].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr& strtab = sh[sh[i].sh_link];
      if (sh[i].sh_offset + sh[i].sh_size > size || strtab.sh_offset + strtab.sh_size > size) break;
      const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
      const char* names = reinterpret_cast<const char*>(base + strtab.sh_offset);
      for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
        if (syms[k].st_name >= strtab.sh_size) continue;
        Symbol s;
        s.name = names + syms[k].st_name;
        s.defined = syms[k].st_shndx != SHN_UNDEF;
        const int vis = ELF64_ST_VISIBILITY(syms[k].st_other);
        s.strong_function = s.defined && ELF64_ST_BIND(syms[k].st_info) == STB_GLOBAL &&
                            ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC &&
                            (vis == STV_DEFAULT || vis == STV_PROTECTED);
        out.push_back(std::move(s));
      }
      break;
    }
  }
  munmap(map, size);
  return out;
}

// The files of every object loaded in this process (the program first).
std::vector<std::string> loaded_objects() {
  std::vector<std::string> files;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* out = static_cast<std::vector<std::string>*>(data);
        std::string name = info->dlpi_name ? info->dlpi_name : "";
        if (name.empty() && out->empty()) name = "/proc/self/exe";
        if (!name.empty()) out->push_back(name);
        return 0;
      },
      &files);
  return files;
}

// The libraries that a wheel's LibTorch carries inside and ddprun or its
// dependencies also link, by how their exported names start.
const std::map<std::string, std::string> kLibraries = {
    {"Gloo", "_ZN4gloo"},          {"protobuf", "_ZN6google8protobuf"}, {"Abseil", "_ZN4absl"},
    {"gRPC", "_ZN4grpc"},          {"fmt", "_ZN3fmt"},                  {"spdlog", "_ZN6spdlog"},
    {"NCCL", "ncclCommInitRank"},  {"libuv", "uv_loop_init"},           {"OpenMP", "omp_get_num_threads"},
};

// Use what a worker uses, so that everything is loaded and bound.
void be_a_worker() {
  ddprun::MemoryStore store;
  ddp::GlooOptions o;
  o.rank = 0;
  o.size = 1;
  o.timeout = 30s;
  o.local_addr = "127.0.0.1";
  ddp::GlooCommunicator comm(store, o);
  at::Tensor t = at::ones({4});
  comm.all_reduce(t);
  ASSERT_EQ(t.sum().item<float>(), 4.0f);
}

TEST(OneCopy, NoLibraryIsExportedByTwoLoadedObjects) {
  be_a_worker();
  const auto objects = loaded_objects();
  ASSERT_GT(objects.size(), 3u);
  // LibTorch's own libraries are one build: a wheel's libtorch_cpu and
  // libtorch_cuda both export the same Gloo functions, of one layout. They
  // count as one provider, named by their folder.
  std::string torch_dir;
  for (const auto& file : objects) {
    if (file.find("/libtorch_cpu.so") != std::string::npos) torch_dir = file.substr(0, file.rfind('/') + 1);
  }
  ASSERT_FALSE(torch_dir.empty()) << "libtorch_cpu is not loaded";
  auto provider = [&](const std::string& file) {
    return file.rfind(torch_dir, 0) == 0 && file.find("/libtorch", torch_dir.size() - 1) == torch_dir.size() - 1
               ? torch_dir + "libtorch*.so"
               : file;
  };
  // library -> strong function -> the providers exporting it
  std::map<std::string, std::map<std::string, std::set<std::string>>> exporters;
  bool read_torch = false;
  for (const auto& file : objects) {
    const auto symbols = dynamic_symbols(file);
    if (file.find("/libtorch_cpu.so") != std::string::npos) read_torch = !symbols.empty();
    for (const auto& s : symbols) {
      if (!s.strong_function) continue;
      for (const auto& [library, prefix] : kLibraries) {
        if (s.name.rfind(prefix, 0) == 0) exporters[library][s.name].insert(provider(file));
      }
    }
  }
  ASSERT_TRUE(read_torch) << "the symbols of libtorch_cpu could not be read";
  for (const auto& [library, functions] : exporters) {
    std::set<std::string> twice_by;
    std::string example;
    for (const auto& [name, files] : functions) {
      if (files.size() < 2) continue;
      if (example.empty()) example = name;
      twice_by.insert(files.begin(), files.end());
    }
    std::string who;
    for (const auto& f : twice_by) who += "\n  " + f;
    EXPECT_TRUE(twice_by.empty()) << library << " is loaded twice: " << example << " and more are exported by" << who;
  }
}

TEST(OneCopy, APrivateGlooIsNeitherImportedNorExported) {
#if DDPRUN_PRIVATE_GLOO
  be_a_worker();
  for (const auto& s : dynamic_symbols("/proc/self/exe")) {
    EXPECT_NE(s.name.rfind("_ZN4gloo", 0), 0u)
        << "the program " << (s.defined ? "exports " : "imports ") << s.name
        << ": its Gloo calls are not bound to the private Gloo";
  }
#else
  GTEST_SKIP() << "this build links the system's shared Gloo (the one its LibTorch links)";
#endif
}

}  // namespace
