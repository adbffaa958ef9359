#include "model/blas_core.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <atomic>
#include <cstring>
#include <vector>

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

// A weight widened row block by row block as the threads multiply it gives
// the bits of the product over the whole widened matrix where the product
// splits along the outputs, each row widened once a product; where it
// splits along x's rows it is declined before anything is widened.
TEST(BlasCoreTest, WidenedProductWidensEachRowOnceAndMatchesTheWidenedMatrix) {
  const int saved = at::get_num_threads();
  at::set_num_threads(2);
  torch::manual_seed(4);
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 7, 5},
                                {17, 50, 33},
                                {256, 1000, 512},
                                {300, 300, 64}}) {
    ASSERT_FALSE(PooledSplitsAlongRows(m, n)) << m << "x" << n;
    const torch::Tensor x = torch::randn({m, k});
    const torch::Tensor w = torch::randn({n, k}).to(torch::kHalf).to(torch::kFloat);
    torch::Tensor want = torch::full({m, n}, std::nanf(""));
    ASSERT_TRUE(
        PooledSgemm(x.data_ptr<float>(), w.data_ptr<float>(), m, n, k, want.data_ptr<float>()))
        << "libtorch did not load OpenBLAS";
    std::vector<std::atomic<int>> widened(static_cast<size_t>(n));
    torch::Tensor out = torch::full({m, n}, std::nanf(""));
    ASSERT_TRUE(PooledSgemmWidened(
        x.data_ptr<float>(),
        [&](int64_t first, int64_t last, float* buf) {
          std::memcpy(buf, w.data_ptr<float>() + first * k, (last - first) * k * sizeof(float));
          for (int64_t r = first; r < last; ++r) widened[r].fetch_add(1);
        },
        m, n, k, out.data_ptr<float>()));
    EXPECT_TRUE(torch::equal(out, want)) << m << "x" << n << "x" << k;
    for (int64_t r = 0; r < n; ++r) ASSERT_EQ(widened[r].load(), 1) << "row " << r;
  }
  // Where the split runs along x's rows every call reads all of w: declined
  // with nothing widened, for the caller to widen w once.
  for (const auto& [m, n] : {std::pair<int64_t, int64_t>{600, 300}, {5, 1}}) {
    ASSERT_TRUE(PooledSplitsAlongRows(m, n)) << m << "x" << n;
    bool widened = false;
    torch::Tensor x = torch::randn({m, 8}), out = torch::empty({m, n});
    EXPECT_FALSE(PooledSgemmWidened(
        x.data_ptr<float>(), [&](int64_t, int64_t, float*) { widened = true; }, m, n, 8,
        out.data_ptr<float>()));
    EXPECT_FALSE(widened) << m << "x" << n;
  }
  bool called = false;
  torch::Tensor one = torch::zeros({1});
  EXPECT_FALSE(PooledSgemmWidened(
      one.data_ptr<float>(), [&](int64_t, int64_t, float*) { called = true; }, 0, 4, 8,
      one.data_ptr<float>()));
  EXPECT_FALSE(called);  // an empty product is declined before anything is widened
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
