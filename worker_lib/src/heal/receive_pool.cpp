#include "heal/receive_pool.h"

#include <sys/mman.h>
#include <unistd.h>

namespace ddp {

struct ReceivePool::Mapping {
  void* base = nullptr;
  size_t length = 0;  // mapped bytes from base (fewer after release_rest)
  ~Mapping() {
    if (length > 0) munmap(base, length);
  }
};

namespace {

size_t page_size() { return static_cast<size_t>(sysconf(_SC_PAGESIZE)); }
size_t round_to_page(size_t n) { return (n + page_size() - 1) / page_size() * page_size(); }

}  // namespace

std::shared_ptr<ReceivePool> ReceivePool::start(size_t bytes) {
  const long free_pages = sysconf(_SC_AVPHYS_PAGES);
  if (bytes == 0 || (free_pages > 0 && bytes > static_cast<size_t>(free_pages) * page_size())) return nullptr;
  auto pool = std::shared_ptr<ReceivePool>(new ReceivePool(bytes));
  std::promise<std::shared_ptr<Mapping>> promise;
  pool->made_ = promise.get_future().share();
  // The kernel zeroes and maps every page now (MAP_POPULATE), on this
  // thread, instead of one fault per page inside the heal.
  pool->maker_ = std::jthread([length = round_to_page(bytes), promise = std::move(promise)]() mutable {
    void* p = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
      promise.set_value(nullptr);
      return;
    }
    auto m = std::make_shared<Mapping>();
    m->base = p;
    m->length = length;
    promise.set_value(std::move(m));
  });
  return pool;
}

ReceivePool::~ReceivePool() = default;

std::shared_ptr<ReceivePool::Mapping> ReceivePool::mapping() { return made_.get(); }

at::Tensor ReceivePool::take(const std::vector<int64_t>& sizes, at::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t d : sizes) numel *= d;
  const size_t nbytes = static_cast<size_t>(numel) * at::elementSize(dtype);
  std::shared_ptr<Mapping> m = mapping();
  if (!m) return {};
  size_t at = 0;
  {
    std::lock_guard lock(mu_);
    if (closed_ || used_ + bytes_for(nbytes) > bytes_) return {};
    at = used_;
    used_ += bytes_for(nbytes);
  }
  // Each tensor holds the mapping: it outlives the pool.
  return at::from_blob(static_cast<char*>(m->base) + at, sizes, [m](void*) {}, at::TensorOptions().dtype(dtype));
}

void ReceivePool::release_rest() {
  std::shared_ptr<Mapping> m = mapping();
  std::lock_guard lock(mu_);
  closed_ = true;
  if (!m) return;
  const size_t keep = round_to_page(used_);
  if (keep < m->length) {
    munmap(static_cast<char*>(m->base) + keep, m->length - keep);
    m->length = keep;
  }
}

size_t ReceivePool::taken() const {
  std::lock_guard lock(mu_);
  return used_;
}

}  // namespace ddp
