#include "util/py_random.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hilnas {
namespace {

using ::testing::ElementsAre;

// Expected values printed by CPython 3.11:
//   r = random.Random(1234); [r.getrandbits(32) for _ in range(3)]
TEST(PyRandomTest, SameStreamAsCPython) {
  PyRandom r(1234);
  EXPECT_EQ(r.Next32(), 4150886329u);
  EXPECT_EQ(r.Next32(), 3342196574u);
  EXPECT_EQ(r.Next32(), 1892932127u);
  // A seed wider than 32 bits feeds init_by_array two words.
  EXPECT_DOUBLE_EQ(PyRandom((1ull << 40) + 5).Random(), 0.5043802970418443);
}

// r = random.Random(1234); r.sample(range(10), 3), r.sample(range(1000), 6),
// r.sample(range(50), 26): the pool branch, the set branch, and the pool
// branch again with a larger set size (k > 5).
TEST(PyRandomTest, SampleDrawsAsCPython) {
  PyRandom r(1234);
  EXPECT_THAT(r.Sample(10, 3), ElementsAre(7, 1, 0));
  EXPECT_THAT(r.Sample(1000, 6), ElementsAre(92, 932, 965, 961, 826, 596));
  EXPECT_THAT(r.Sample(50, 26), ElementsAre(2, 42, 44, 5, 6, 22, 15, 1, 48, 41, 47, 30, 29, 9,
                                            46, 11, 7, 0, 31, 28, 33, 49, 21, 17, 14, 38));
}

}  // namespace
}  // namespace hilnas
