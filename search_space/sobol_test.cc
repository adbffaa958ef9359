#include "search_space/sobol.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

TEST(SobolTest, DrawsDistinctFeasibleArchitecturesOfTheDefaultSpace) {
  ASSERT_OK_AND_ASSIGN(Space space, Space::FromProto(DefaultSearchSpace()));
  ASSERT_OK_AND_ASSIGN(SobolSample s, SampleSobol(space, 200, /*seed=*/7));
  ASSERT_EQ(s.archs.size(), 200u);
  std::set<std::vector<double>> distinct(s.points.begin(), s.points.end());
  EXPECT_EQ(distinct.size(), 200u);
  for (size_t i = 0; i < s.archs.size(); ++i) {
    EXPECT_OK(space.Contains(s.archs[i]));
    ASSERT_OK_AND_ASSIGN(auto x, space.Encode(s.archs[i]));
    EXPECT_EQ(x, s.points[i]);
  }
  EXPECT_GT(s.drawn, 200);  // the constraint rejects some draws
}

TEST(SobolTest, CoversEveryLayerCount) {
  ASSERT_OK_AND_ASSIGN(Space space, Space::FromProto(DefaultSearchSpace()));
  ASSERT_OK_AND_ASSIGN(SobolSample s, SampleSobol(space, 64, 1));
  std::set<int> layers;
  for (const Arch& a : s.archs) layers.insert(a.num_layers);
  EXPECT_EQ(layers.size(), space.layer_choices().size());
}

TEST(SobolTest, SameSeedSameDrawOtherSeedOtherDraw) {
  ASSERT_OK_AND_ASSIGN(auto a, SobolPoints(5, 32, 3));
  ASSERT_OK_AND_ASSIGN(auto b, SobolPoints(5, 32, 3));
  ASSERT_OK_AND_ASSIGN(auto c, SobolPoints(5, 32, 4));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  for (const auto& p : a) {
    for (double v : p) EXPECT_TRUE(v >= 0 && v < 1);
  }
}

TEST(SobolTest, TooSmallASpaceIsReported) {
  SearchSpace p = DefaultSearchSpace();
  p.mutable_num_layers()->Clear();
  p.mutable_num_layers()->add_values(1);
  p.mutable_d_ffn()->Clear();
  p.mutable_d_ffn()->add_values(256);
  p.mutable_d_model()->Clear();
  p.mutable_d_model()->add_values(128);
  ASSERT_OK_AND_ASSIGN(Space space, Space::FromProto(p));  // 3 architectures
  EXPECT_THAT(SampleSobol(space, 5, 1, 4096),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("found only 3")));
}

}  // namespace
}  // namespace hilnas
