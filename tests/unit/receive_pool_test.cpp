// ReceivePool (heal/receive_pool.h): the memory a replacement prepares for
// its heal. Tensors come out of one mapping back to back until it is full,
// outlive the pool, and the pages none took are given back.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "heal/receive_pool.h"

namespace ddp {
namespace {

// Whether [p, p + n) is mapped in this process (mincore fails with ENOMEM
// on an unmapped page).
bool mapped(const void* p, size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto* first = reinterpret_cast<unsigned char*>(reinterpret_cast<uintptr_t>(p) / page * page);
  std::vector<unsigned char> residency((n + page - 1) / page + 1);
  errno = 0;
  return mincore(first, static_cast<const unsigned char*>(p) + n - first, residency.data()) == 0;
}

TEST(ReceivePool, CarvesTensorsBackToBackUntilFullThenGivesNone) {
  const size_t a_bytes = ReceivePool::bytes_for(1000 * 4), b_bytes = ReceivePool::bytes_for(3 * 5 * 8);
  auto pool = ReceivePool::start(a_bytes + b_bytes + 128);
  ASSERT_TRUE(pool);
  at::Tensor a = pool->take({1000}, at::kFloat);
  at::Tensor b = pool->take({3, 5}, at::kDouble);
  ASSERT_TRUE(a.defined() && b.defined());
  EXPECT_EQ(static_cast<char*>(b.data_ptr()), static_cast<char*>(a.data_ptr()) + a_bytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data_ptr()) % 64, 0u);
  EXPECT_EQ(b.sizes().vec(), (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(b.scalar_type(), at::kDouble);
  EXPECT_EQ(pool->taken(), a_bytes + b_bytes);
  // 128 bytes are left: 33 floats do not fit, 32 do.
  EXPECT_FALSE(pool->take({33}, at::kFloat).defined());
  EXPECT_TRUE(pool->take({32}, at::kFloat).defined());
  // Its pages were made already (zeroed), and the tensors hold them past the pool.
  EXPECT_EQ(a.sum().item<float>(), 0.0f);
  pool.reset();
  a.fill_(2);
  b.fill_(3);
  EXPECT_EQ(a.sum().item<float>(), 2000.0f);
  EXPECT_EQ(b.sum().item<double>(), 45.0);
}

TEST(ReceivePool, ReleaseRestUnmapsThePagesNoTensorTook) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  auto pool = ReceivePool::start(64 * page);
  ASSERT_TRUE(pool);
  at::Tensor t = pool->take({static_cast<int64_t>(page + 1)}, at::kByte);  // two pages' worth
  ASSERT_TRUE(t.defined());
  const char* base = static_cast<const char*>(t.data_ptr());
  ASSERT_TRUE(mapped(base + 2 * page, 62 * page));
  pool->release_rest();
  EXPECT_TRUE(mapped(base, 2 * page));
  EXPECT_FALSE(mapped(base + 2 * page, page)) << "the first page no tensor took is still mapped";
  EXPECT_FALSE(mapped(base + 63 * page, page)) << "the last page is still mapped";
  EXPECT_FALSE(pool->take({1}, at::kByte).defined()) << "a released pool gave another tensor";
  t.fill_(1);  // what was taken stays
  EXPECT_EQ(t.sum().item<int64_t>(), static_cast<int64_t>(page + 1));
}

TEST(ReceivePool, NoBytesOrMoreThanTheMachineHasFreeMakesNoPool) {
  EXPECT_FALSE(ReceivePool::start(0));
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  // Twice the machine's memory (an mmap the kernel refuses too, should the check go).
  const size_t twice = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * page * 2;
  EXPECT_FALSE(ReceivePool::start(twice)) << "a hint past the free memory was believed";
}

}  // namespace
}  // namespace ddp
