#include "search/pareto.h"

#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hilnas {
namespace {

using ::testing::ElementsAre;

TEST(ParetoTest, NonDominatedKeepsTheFrontOnceAndSkipsNan) {
  const double nan = std::nan("");
  std::vector<Objectives> p = {{1, 5}, {2, 2}, {3, 3}, {5, 1}, {2, 2}, {0, nan}, {4, 1}};
  // {3,3} is dominated by {2,2}; {5,1} by {4,1}; the second {2,2} is a duplicate.
  EXPECT_THAT(NonDominated(p), ElementsAre(0, 1, 6));
  EXPECT_TRUE(Dominates({1, 1}, {1, 2}));
  EXPECT_FALSE(Dominates({1, 2}, {1, 2}));
}

TEST(ParetoTest, TwoObjectiveHypervolumeByHand) {
  // Reference (4, 4); points (1,3), (2,2), (3,1): staircase area 3 + 2 + 1.
  EXPECT_DOUBLE_EQ(Hypervolume({{1, 3}, {2, 2}, {3, 1}}, {4, 4}), 6.0);
  // A dominated point and one outside the box change nothing.
  EXPECT_DOUBLE_EQ(Hypervolume({{1, 3}, {2, 2}, {3, 1}, {3, 3}, {0.5, 5}}, {4, 4}), 6.0);
  EXPECT_DOUBLE_EQ(Hypervolume({}, {4, 4}), 0.0);
  EXPECT_DOUBLE_EQ(Hypervolume({{4, 0}}, {4, 4}), 0.0);  // on the boundary: nothing
}

// Monte Carlo-free check in 3 objectives: the union of boxes [p, ref]
// measured on a fine grid of cell centres equals the sliced hypervolume.
TEST(ParetoTest, ThreeObjectiveHypervolumeMatchesAGridCount) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> u(0, 9);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<Objectives> p;
    for (int i = 0; i < 12; ++i) p.push_back({double(u(rng)), double(u(rng)), double(u(rng))});
    const Objectives ref = {10, 10, 10};
    int cells = 0;  // unit cells [x, x+1)^3 dominated by some point
    for (int x = 0; x < 10; ++x)
      for (int y = 0; y < 10; ++y)
        for (int z = 0; z < 10; ++z) {
          for (const Objectives& q : p) {
            if (q[0] <= x && q[1] <= y && q[2] <= z) {
              ++cells;
              break;
            }
          }
        }
    EXPECT_DOUBLE_EQ(Hypervolume(p, ref), cells) << "trial " << trial;
  }
}

TEST(ParetoTest, AddingAFrontPointNeverLowersHypervolume) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<Objectives> p;
  double last = 0;
  for (int i = 0; i < 50; ++i) {
    p.push_back({u(rng), u(rng), u(rng), u(rng)});
    const double hv = Hypervolume(p, {1, 1, 1, 1});
    EXPECT_GE(hv, last - 1e-12);
    EXPECT_LE(hv, 1.0);
    last = hv;
  }
}

}  // namespace
}  // namespace hilnas
