#include "model/blas_core.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hilnas {
namespace {

TEST(BlasCoreTest, FeaturesNameTheWidestCoreTheirKernelsNeed) {
  EXPECT_EQ(BlasCoreForFeatures(true, true), "SkylakeX");
  EXPECT_EQ(BlasCoreForFeatures(false, true), "Haswell");
  EXPECT_EQ(BlasCoreForFeatures(false, false), "");
}

TEST(BlasCoreTest, FallbackCoresDoNotCoverWhatTheCpuCanDo) {
  // What OpenBLAS 0.3.21 loaded on an Emerald Rapids host, and on this
  // project's Zen 4 machines.
  EXPECT_FALSE(BlasCoreCovers("Prescott", "SkylakeX"));
  EXPECT_FALSE(BlasCoreCovers("Prescott", "Haswell"));
  EXPECT_TRUE(BlasCoreCovers("Cooperlake", "SkylakeX"));
  EXPECT_TRUE(BlasCoreCovers("SAPPHIRERAPIDS", "skylakex"));
  EXPECT_TRUE(BlasCoreCovers("SkylakeX", "SkylakeX"));
  EXPECT_TRUE(BlasCoreCovers("Zen", "Haswell"));
  EXPECT_FALSE(BlasCoreCovers("Zen", "SkylakeX"));
  EXPECT_FALSE(BlasCoreCovers("Sandybridge", "Haswell"));
  EXPECT_TRUE(BlasCoreCovers("Core2", ""));  // nothing asked for
}

TEST(BlasCoreTest, DescriptionNamesTheLoadedCore) {
  // Test binaries link OpenBLAS through libtorch (scripts/setup installs
  // libopenblas0-pthread as libblas.so.3).
  EXPECT_THAT(BlasCoreDescription(), ::testing::StartsWith("OpenBLAS "));
}

}  // namespace
}  // namespace hilnas
