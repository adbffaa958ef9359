#include "model/blas_core.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

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

// The pooled product computes libtorch's x @ w^T at every shape a prompt
// meets: one row, column counts off the 16-column blocks, more threads than
// blocks.
TEST(BlasCoreTest, PooledProductEqualsLibtorchs) {
  const int saved = at::get_num_threads();
  at::set_num_threads(2);
  torch::manual_seed(3);
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 7, 5},
                                {3, 16, 64},
                                {17, 50, 33},
                                {256, 1000, 512},
                                {5, 1, 9},
                                {0, 4, 8}}) {
    const torch::Tensor x = torch::randn({m, k}), w = torch::randn({n, k});
    torch::Tensor out = torch::full({m, n}, std::nanf(""));
    const bool pooled =
        PooledSgemm(x.data_ptr<float>(), w.data_ptr<float>(), m, n, k, out.data_ptr<float>());
    if (m == 0) {  // nothing to compute: left to libtorch
      EXPECT_FALSE(pooled);
      continue;
    }
    ASSERT_TRUE(pooled) << "libtorch did not load OpenBLAS";
    const torch::Tensor want = torch::matmul(x, w.t());
    EXPECT_LT((out - want).abs().max().item<float>(), 1e-4 * std::sqrt(static_cast<float>(k)))
        << m << "x" << n << "x" << k;
  }
  at::set_num_threads(saved);
}

// PooledSgemm leaves OpenBLAS at one thread; a scope gives it back what it
// had and makes PooledSgemm decline, for training.
TEST(BlasCoreTest, ThreadsScopeGivesOpenBlasItsThreadsBack) {
  ASSERT_GT(OpenBlasThreads(), 0) << "libtorch did not load OpenBLAS";
  SetOpenBlasThreads(2);
  const torch::Tensor x = torch::randn({4, 8}), w = torch::randn({32, 8});
  torch::Tensor out = torch::empty({4, 32});
  ASSERT_TRUE(PooledSgemm(x.data_ptr<float>(), w.data_ptr<float>(), 4, 32, 8, out.data_ptr<float>()));
  EXPECT_EQ(OpenBlasThreads(), 1);
  {
    const OpenBlasThreadsScope scope;
    EXPECT_EQ(OpenBlasThreads(), 2);
    EXPECT_FALSE(
        PooledSgemm(x.data_ptr<float>(), w.data_ptr<float>(), 4, 32, 8, out.data_ptr<float>()));
    EXPECT_EQ(OpenBlasThreads(), 2);
  }
  EXPECT_TRUE(PooledSgemm(x.data_ptr<float>(), w.data_ptr<float>(), 4, 32, 8, out.data_ptr<float>()));
  EXPECT_EQ(OpenBlasThreads(), 1);
}

}  // namespace
}  // namespace hilnas
