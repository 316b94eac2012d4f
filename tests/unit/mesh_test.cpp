// DeviceMesh and get() with ranks as threads.
#include <gtest/gtest.h>

#include "ddp/ddp.h"
#include "support/thread_ranks.h"

namespace {

using ddptest::run_ranks;

TEST(Mesh, SubGroupCollectivesOnTwoByTwo) {
  run_ranks(4, [](ddp::World& w) {
    ddp::DeviceMesh mesh(w, {2, 2}, {"dp", "tp"});
    const int r = w.rank();
    // Row-major: rank = 2 * dp + tp.
    EXPECT_EQ(mesh.coordinate("dp"), r / 2);
    EXPECT_EQ(mesh.coordinate("tp"), r % 2);
    EXPECT_EQ(mesh.slice("dp"), (std::vector<int>{r % 2, r % 2 + 2}));
    EXPECT_EQ(mesh.slice("tp"), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
    // Along dp, rank r meets r ^ 2; along tp, r ^ 1.
    at::Tensor t = at::full({3}, static_cast<float>(r));
    mesh.communicator("dp").all_reduce(t, ddp::ReduceOp::kSum);
    EXPECT_EQ(t[0].item<float>(), r + (r ^ 2));
    at::Tensor u = at::full({3}, static_cast<float>(r));
    mesh.communicator("tp").all_reduce(u, ddp::ReduceOp::kSum);
    EXPECT_EQ(u[0].item<float>(), r + (r ^ 1));
    EXPECT_EQ(mesh.communicator("tp").size(), 2);
    EXPECT_EQ(mesh.communicator("tp").rank(), r % 2);
    // The whole world still works alongside.
    at::Tensor all = at::ones({1});
    w.all_reduce(all);
    EXPECT_EQ(all.item<float>(), 4);
  });
}

TEST(Mesh, GetUsesTheRegisteredMeshOrADimension) {
  run_ranks(4, [](ddp::World& w) {
    auto mesh = std::make_shared<ddp::DeviceMesh>(w, std::vector<int>{2, 2},
                                                  std::vector<std::string>{"dp", "tp"});
    EXPECT_EQ(ddp::get("ws"), 4);  // the World init() registered
    ddp::register_mesh(mesh);
    EXPECT_EQ(ddp::get("ws"), 4);  // an N-D mesh: all its ranks
    EXPECT_EQ(ddp::get("rank"), w.rank());
    EXPECT_EQ(ddp::get("ws", "tp"), 2);
    EXPECT_EQ(ddp::get("rank", "tp"), w.rank() % 2);
    EXPECT_EQ(ddp::get("rank", "dp"), w.rank() / 2);
    EXPECT_EQ(ddp::get("grank", "dp"), w.rank());
    EXPECT_EQ(ddp::get("lrank"), w.local_rank());
    EXPECT_EQ(&ddp::get<ddp::Communicator>("pg", "tp"), &mesh->communicator("tp"));

    auto line = std::make_shared<ddp::DeviceMesh>(w, std::vector<int>{4}, std::vector<std::string>{"dp"});
    EXPECT_EQ(ddp::get("rank", *line), w.rank());
    ddp::register_mesh(line);
    EXPECT_EQ(&ddp::get<ddp::Communicator>("pg"), &line->communicator("dp"));
    EXPECT_THROW(ddp::get("pg"), std::invalid_argument);
  });
}

std::string mesh_error(ddp::World& w, std::vector<int> shape, std::vector<std::string> names) {
  try {
    ddp::DeviceMesh m(w, shape, names);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Mesh, BadShapesNamesAndDimensionsSayWhatWasExpected) {
  run_ranks(1, [](ddp::World& w) {
    EXPECT_EQ(mesh_error(w, {2, 2}, {"dp", "tp"}),
              "ddp::DeviceMesh: shape 2x2 holds 4 ranks but the world has 1");
    EXPECT_EQ(mesh_error(w, {1, 1}, {"dp"}),
              "ddp::DeviceMesh: 2 dimensions (1x1) but 1 names (dp)");
    EXPECT_EQ(mesh_error(w, {1, 1}, {"dp", "dp"}),
              "ddp::DeviceMesh: dimension name 'dp' appears twice");
    EXPECT_EQ(mesh_error(w, {}, {}), "ddp::DeviceMesh: shape is empty");
    ddp::DeviceMesh m(w, {1, 1}, {"dp", "tp"});
    try {
      m.communicator("pp");
      FAIL();
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "ddp::DeviceMesh: no dimension 'pp'; this mesh has: dp, tp");
    }
  });
}

TEST(Mesh, GetWithADimensionNeedsARegisteredMesh) {
  run_ranks(1, [](ddp::World&) {
    try {
      ddp::get("ws", "dp");
      FAIL();
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("no mesh is registered"), std::string::npos);
    }
  });
}

}  // namespace
