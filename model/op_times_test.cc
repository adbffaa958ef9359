#include "model/op_times.h"

#include <torch/torch.h>

#include <chrono>

#include "gtest/gtest.h"
#include "model/attention.h"

namespace hilnas {
namespace {

TEST(OpTimerTest, CountsOpsOnItsThreadWhileAliveAndAnOpsChildrenOnce) {
  torch::NoGradGuard no_grad;
  const torch::Tensor q = torch::randn({1, 4, 16, 8}), k = torch::randn({1, 2, 16, 8});
  {
    OpTimer timer;
    const auto t0 = std::chrono::steady_clock::now();
    BlockedAttention(q, k, k, 0, 0, /*window=*/0);
    BlockedAttention(q, k, k, 0, 0, /*window=*/4);
    BlockedAttention(q, k, k, 0, 0, /*window=*/4);
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(timer.ops().at("hilnas::attention").calls, 1);
    EXPECT_EQ(timer.ops().at("hilnas::attention_window").calls, 2);
    EXPECT_GT(timer.Seconds("hilnas::attention"), 0);
    EXPECT_EQ(timer.Seconds("hilnas::gemv"), 0);  // none ran
    // Self times: an op's children are not in it, so nothing is counted
    // twice and the ops' times add up to no more than the wall time.
    double total = 0;
    for (const auto& [name, t] : timer.ops()) total += t.seconds;
    EXPECT_LE(total, wall);
    timer.Clear();
    EXPECT_TRUE(timer.ops().empty());
    torch::matmul(q, q.transpose(-1, -2));
    EXPECT_FALSE(timer.ops().empty());
  }
  OpTimer second;  // a timer after another starts empty
  EXPECT_TRUE(second.ops().empty());
}

}  // namespace
}  // namespace hilnas
