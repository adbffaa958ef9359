#include "device_agent/sample_stats.h"

#include "gtest/gtest.h"

namespace hilnas {
namespace {

TEST(SampleStatsTest, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({7}), 7);
}

TEST(SampleStatsTest, RelativeSpreadIgnoresOneOutlier) {
  EXPECT_NEAR(RelativeSpread({100, 101, 99, 100, 500}), 0.01, 1e-12);
  EXPECT_DOUBLE_EQ(RelativeSpread({100}), 0);
}

TEST(SampleStatsTest, MedianStandardErrorShrinksWithMoreSamples) {
  const std::vector<double> few = {90, 110, 95, 105};
  std::vector<double> many;
  for (int i = 0; i < 16; ++i) many.push_back(few[i % 4]);
  EXPECT_GT(MedianStandardError(few), 1.9 * MedianStandardError(many));
  EXPECT_DOUBLE_EQ(MedianStandardError({5}), 0);
}

TEST(SampleStatsTest, TrendCorrelationIsOneForIncreasingRuns) {
  EXPECT_NEAR(TrendCorrelation({1, 2, 3, 4, 5}), 1.0, 1e-12);
  EXPECT_NEAR(TrendCorrelation({5, 4, 3, 2, 1}), -1.0, 1e-12);
}

TEST(SampleStatsTest, ThrottlingFlaggedForSteadySlowdownOnly) {
  EXPECT_TRUE(ThrottlingSuspected({100, 104, 109, 115, 121, 128}));
  EXPECT_FALSE(ThrottlingSuspected({100, 101, 100.5, 101.2, 100.8, 101}));  // flat noise
  EXPECT_FALSE(ThrottlingSuspected({100, 130, 99, 128, 101, 129}));         // no trend
  EXPECT_FALSE(ThrottlingSuspected({100, 120, 140}));                       // too few
}

}  // namespace
}  // namespace hilnas
