#include "model/attention.h"

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace hilnas {
namespace {

struct Case {
  int64_t t, s, q_start, k_start, window, block;
};

// The blocked kernel against the plain computation, in double, for full and
// sliding-window attention: a whole prompt, a chunk after a cached prefix,
// a window-trimmed cache, decode steps, and blocks that do not divide T.
TEST(BlockedAttentionTest, EqualsTheReferenceInDoubleForEveryShape) {
  torch::manual_seed(3);
  const Case cases[] = {
      {64, 64, 0, 0, 0, 16},     // prompt, full
      {64, 64, 0, 0, 8, 16},     // prompt, window 8 inside a block
      {70, 70, 0, 0, 24, 16},    // ragged last block, window across blocks
      {20, 52, 32, 0, 0, 16},    // chunk after 32 cached tokens
      {20, 27, 32, 25, 8, 16},   // chunk, SWA cache trimmed to the window
      {1, 100, 99, 0, 0, 128},   // decode, full
      {1, 16, 99, 84, 16, 128},  // decode, window 16
      {5, 5, 0, 0, 0, 2},        // tiny blocks
      {33, 33, 0, 0, 1, 8},      // window 1: each query sees itself only
  };
  for (const Case& c : cases) {
    for (const auto& [h, kvh] : {std::pair{8, 2}, {4, 4}}) {
      auto q = torch::randn({2, h, c.t, 16}, torch::kDouble);
      auto k = torch::randn({2, kvh, c.s, 16}, torch::kDouble);
      auto v = torch::randn({2, kvh, c.s, 16}, torch::kDouble);
      auto want = ReferenceAttention(q, k, v, c.q_start, c.k_start, c.window);
      auto got = BlockedAttention(q, k, v, c.q_start, c.k_start, c.window, c.block);
      EXPECT_LT((got - want).abs().max().item<double>(), 1e-12)
          << "t " << c.t << " s " << c.s << " window " << c.window << " heads " << h << "/" << kvh;
    }
  }
}

TEST(BlockedAttentionTest, FloatMatchesTheReferenceToRounding) {
  torch::manual_seed(4);
  auto q = torch::randn({1, 8, 300, 64});
  auto k = torch::randn({1, 2, 300, 64});
  auto v = torch::randn({1, 2, 300, 64});
  for (int64_t window : {0, 128}) {
    auto want = ReferenceAttention(q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble),
                                   0, 0, window);
    auto got = BlockedAttention(q, k, v, 0, 0, window);
    EXPECT_EQ(got.scalar_type(), torch::kFloat);
    EXPECT_LT((got.to(torch::kDouble) - want).abs().max().item<double>(), 1e-5);
  }
}

// The float kernel (raw loops, register tiles) on every case of the double
// test, with head sizes that are and are not a tile multiple, head groups
// that do not fill a row tile, and keys read from a strided cache.
TEST(BlockedAttentionTest, FloatKernelMatchesTheReferenceOnEveryShape) {
  torch::manual_seed(5);
  const Case cases[] = {
      {64, 64, 0, 0, 0, 16},    {64, 64, 0, 0, 8, 16},      {70, 70, 0, 0, 24, 16},
      {20, 52, 32, 0, 0, 16},   {20, 27, 32, 25, 8, 16},    {1, 100, 99, 0, 0, 128},
      {1, 16, 99, 84, 16, 128}, {5, 5, 0, 0, 0, 2},         {33, 33, 0, 0, 1, 8},
      {300, 300, 0, 0, 0, 128}, {300, 300, 0, 0, 128, 128}, {1, 700, 699, 0, 0, 128},
  };
  for (const Case& c : cases) {
    for (int64_t hd : {8, 24, 64}) {
      for (const auto& [h, kvh] : {std::pair{8, 2}, {6, 2}, {3, 3}}) {
        auto q = torch::randn({2, h, c.t, hd});
        // Keys and values inside a larger cache: heads strided, rows contiguous.
        auto kc = torch::randn({2, kvh, c.s + 5, hd}), vc = torch::randn({2, kvh, c.s + 5, hd});
        auto k = kc.narrow(2, 2, c.s), v = vc.narrow(2, 2, c.s);
        auto want = ReferenceAttention(q.to(torch::kDouble), k.to(torch::kDouble),
                                       v.to(torch::kDouble), c.q_start, c.k_start, c.window);
        auto got = BlockedAttention(q, k, v, c.q_start, c.k_start, c.window, c.block);
        ASSERT_EQ(got.scalar_type(), torch::kFloat);
        EXPECT_LT((got.to(torch::kDouble) - want).abs().max().item<double>(), 2e-5)
            << "t " << c.t << " s " << c.s << " window " << c.window << " hd " << hd << " heads "
            << h << "/" << kvh;
      }
    }
  }
}

}  // namespace
}  // namespace hilnas
