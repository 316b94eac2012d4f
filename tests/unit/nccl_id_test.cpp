// make_nccl_unique_id through dlopen("libnccl.so.2"): works without a GPU
// (NCCL only opens its bootstrap listener). Skipped where no libnccl loads.
// Each id leaves NCCL's bootstrap thread waiting in this test process,
// which is why ddprun itself no longer makes ids (launcher/plan.cpp).
#include <gtest/gtest.h>

#include "rendezvous/server/nccl_unique_id.h"

namespace ddprun {
namespace {

TEST(NcclUniqueId, MakesDistinct128ByteIdsWithoutAGpu) {
  std::string a, b;
  try {
    a = make_nccl_unique_id();
  } catch (const std::runtime_error& e) {
    GTEST_SKIP() << e.what();
  }
  b = make_nccl_unique_id();
  EXPECT_EQ(a.size(), 128u);
  EXPECT_EQ(b.size(), 128u);
  EXPECT_NE(a, b);  // a fresh listener (port, magic) per id
}

}  // namespace
}  // namespace ddprun
