#include "model/quant.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gemv.h"
#include "util/cpu_caches.h"

namespace hilnas {
namespace {

using ::testing::HasSubstr;

torch::Tensor Random(int64_t rows, int64_t cols, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randn({rows, cols});
}

// w . x in double over the dequantized weights and activations: what every
// kernel path must compute up to f32 rounding.
double ReferenceDot(QuantType t, const uint8_t* row, const uint8_t* xq, int64_t cols) {
  std::vector<float> w(cols), x(cols);
  DequantizeRow(t, row, cols, w.data());
  DequantizeRow(QuantType::kQ8_0, xq, cols, x.data());
  double s = 0;
  for (int64_t i = 0; i < cols; ++i) s += static_cast<double>(w[i]) * x[i];
  return s;
}

// One decode step's fused products of quantized matrices (QuantGemvsInto,
// as WeightGemvsInto runs them) on `threads` threads: their outputs one
// after another, zeros where nothing was written.
torch::Tensor FusedProducts(const std::vector<const torch::Tensor*>& ws, const torch::Tensor& x,
                            int threads) {
  int64_t rows = 0;
  for (const torch::Tensor* w : ws) rows += QuantRows(*w);
  torch::Tensor y = torch::zeros({rows});
  std::vector<GemvProduct> products;
  float* p = y.data_ptr<float>();
  for (const torch::Tensor* w : ws) {
    products.push_back({w, p});
    p += QuantRows(*w);
  }
  const int before = at::get_num_threads();
  at::set_num_threads(threads);
  QuantGemvsInto(products.data(), products.size(), x.data_ptr<float>(), KernelPath::kBest);
  at::set_num_threads(before);
  return y;
}

class QuantTest : public ::testing::TestWithParam<QuantType> {};

TEST_P(QuantTest, DequantizedWeightsStayWithinHalfAStep) {
  const QuantType t = GetParam();
  const torch::Tensor w = Random(37, 96, 1);
  const torch::Tensor q = QuantizeMatrix(w, t).value();
  ASSERT_EQ(QuantTypeOf(q), t);
  EXPECT_EQ(q.size(1), 3);
  EXPECT_EQ(QuantColumns(q), 96);
  const torch::Tensor back = DequantizeMatrix(q);
  const auto wa = w.accessor<float, 2>();
  const auto ba = back.accessor<float, 2>();
  for (int64_t r = 0; r < 37; ++r) {
    for (int64_t b = 0; b < 3; ++b) {
      double amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(double(wa[r][b * 32 + j])));
      // Q8_0: steps of amax / 127; Q4_0: of amax / 8, the largest value at
      // -8 steps exactly and the others rounded to the nearest of -8..7
      // steps, so on the far side values past 7.5 steps clip to 7.
      const double step = t == QuantType::kQ8_0 ? amax / 127 : amax / 8;
      for (int j = 0; j < 32; ++j) {
        const double x = wa[r][b * 32 + j];
        const double tol = t == QuantType::kQ4_0 && std::fabs(x) > 7.5 * step ? step : step / 2;
        EXPECT_NEAR(ba[r][b * 32 + j], x, tol + amax * 2e-3)
            << "row " << r << " block " << b << " weight " << j;
      }
    }
  }
}

TEST_P(QuantTest, EveryPathsDotProductsMatchADoubleReference) {
  const QuantType t = GetParam();
  // {rows, cols, tokens}: a tile of 4 tokens and 3 left over; and rows of
  // 8192, which QuantGemm splits into several blocks of rows and of tokens
  // (about 128 KiB and 256 KiB each: 28 tokens a block here).
  for (const auto& [rows, cols, tokens] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{45, 320, 7}, {45, 8192, 37}}) {
    const torch::Tensor q = QuantizeMatrix(Random(rows, cols, 2), t).value();
    const torch::Tensor x = Random(tokens, cols, 3);
    std::vector<uint8_t> xq(tokens * cols / 32 * 34);
    for (int64_t i = 0; i < tokens; ++i) {
      QuantizeActivations(x.data_ptr<float>() + i * cols, cols, xq.data() + i * cols / 32 * 34);
    }
    const uint8_t* w = q.data_ptr<uint8_t>();
    const int64_t row_bytes = q.size(1) * q.size(2);
    for (KernelPath path : {KernelPath::kBest, KernelPath::kBaseline, KernelPath::kPortable}) {
      std::vector<float> c(tokens * rows), y(rows);
      QuantGemm(t, w, cols / 32, xq.data(), tokens, c.data(), rows, 0, rows, path);
      QuantRowsDot(t, w, cols / 32, xq.data() + 2 * cols / 32 * 34, y.data(), 0, rows, path);
      for (int64_t i = 0; i < tokens; ++i) {
        for (int64_t o = 0; o < rows; ++o) {
          const double want =
              ReferenceDot(t, w + o * row_bytes, xq.data() + i * cols / 32 * 34, cols);
          // f32 sums over cols / 32 scaled blocks: rounding grows with
          // their number (1e-5 at 10 blocks, as ever; ~8e-5 seen at 256).
          const double tol = 1e-5 * (std::fabs(want) + 1) * std::max(1.0, cols / 320.0);
          EXPECT_NEAR(c[i * rows + o], want, tol)
              << QuantKernelName() << " path " << static_cast<int>(path) << " cols " << cols
              << " token " << i << " row " << o;
          if (i == 2) {
            EXPECT_NEAR(y[o], want, tol);
          }
        }
      }
    }
  }
}

TEST_P(QuantTest, MatmulOfPromptAndTokenAgreesWithTheDequantizedProduct) {
  const QuantType t = GetParam();
  const torch::Tensor w = Random(70, 128, 4);
  const torch::Tensor q = QuantizeMatrix(w, t).value();
  const torch::Tensor x = Random(9, 128, 5).view({1, 9, 128});
  const torch::Tensor got = QuantMatmul(x, q);
  ASSERT_EQ(got.sizes(), (std::vector<int64_t>{1, 9, 70}));
  // Against f32 x times the dequantized weights: only activation rounding
  // (Q8_0, ~0.4% of each block's largest value) separates them.
  const torch::Tensor want = torch::matmul(x, DequantizeMatrix(q).t());
  EXPECT_LT((got - want).abs().max().item<float>(), 0.02 * want.abs().max().item<float>());
  const torch::Tensor one = QuantMatmul(x.narrow(1, 4, 1), q);
  EXPECT_TRUE(torch::allclose(one.view({70}), got[0][4], 1e-5, 1e-5));
}

// A decode step's fused products split across threads by their
// multiply-adds, not their bytes: full4's q/k/v (512 + 128 + 128 rows of
// 512) at Q4_0 are 221 KiB, under the float GEMV's 256 KiB, yet take two
// threads' shares; and a split gives one thread's bits.
TEST_P(QuantTest, FusedDecodeProductsSplitByTheirWorkAndKeepTheirBits) {
  EXPECT_LE(2 * QuantGemvGrainRows(512), 768);
  EXPECT_LE(2 * QuantGemvGrainRows(512), 512);  // o alone
  const QuantType t = GetParam();
  const torch::Tensor wq = QuantizeMatrix(Random(512, 512, 7), t).value();
  const torch::Tensor wk = QuantizeMatrix(Random(128, 512, 8), t).value();
  const torch::Tensor wv = QuantizeMatrix(Random(128, 512, 9), t).value();
  const torch::Tensor x = Random(1, 512, 10).view({512});
  auto products = [&](int threads) { return FusedProducts({&wq, &wk, &wv}, x, threads); };
  const torch::Tensor one = products(1);
  EXPECT_TRUE(torch::equal(products(2), one));
  EXPECT_TRUE(torch::equal(products(4), one));
  EXPECT_GT(one.abs().sum().item<float>(), 0);
}

INSTANTIATE_TEST_SUITE_P(Types, QuantTest, ::testing::Values(QuantType::kQ4_0, QuantType::kQ8_0),
                         [](const auto& info) { return std::string(QuantTypeName(info.param)); });

// x's rows as Q8_0 activations, one after another.
std::vector<uint8_t> Activations(const torch::Tensor& x) {
  const int64_t tokens = x.size(0), cols = x.size(1);
  std::vector<uint8_t> xq(tokens * cols / 32 * 34);
  for (int64_t i = 0; i < tokens; ++i) {
    QuantizeActivations(x.data_ptr<float>() + i * cols, cols, xq.data() + i * cols / 32 * 34);
  }
  return xq;
}

// Q4_0 rows grouped eight at a time (model/quant.h) are the same weights in
// the same storage, and every path's products over them are the row form's:
// a prompt's bit for bit where the row form's kernel regroups per call
// (x86), and within f32 rounding of a double reference on every path.
TEST(QuantTest, GroupedQ4RowsHoldTheSameWeightsAndProducts) {
  // {cols, tokens, rows}. 4096 x 67 x 72: a prompt's grouped product runs
  // in blocks (quant_kernels.cc's GroupsInBlocks: 60 tokens, 7 groups at
  // that width), two of tokens and two of groups here.
  for (const auto& [cols, tokens, rows] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {320, 7, 48}, {320, 1, 48}, {2048, 5, 48}, {4096, 67, 72}}) {
    const int64_t blocks = cols / 32;
    const torch::Tensor q = QuantizeMatrix(Random(rows, cols, 11), QuantType::kQ4_0).value();
    torch::Tensor g = q.clone();
    const void* storage = g.data_ptr();
    ASSERT_TRUE(GroupQuantRows(g));
    EXPECT_TRUE(QuantGrouped(g));
    EXPECT_FALSE(QuantGrouped(q));
    EXPECT_EQ(g.data_ptr(), storage);  // in place
    EXPECT_EQ(g.sizes(), (std::vector<int64_t>{rows / 8, blocks, 144}));
    EXPECT_EQ(QuantTypeOf(g), QuantType::kQ4_0);
    EXPECT_EQ(QuantRows(g), rows);
    EXPECT_EQ(QuantColumns(g), cols);
    EXPECT_FALSE(torch::equal(g.reshape({-1}), q.reshape({-1})));         // reordered...
    EXPECT_TRUE(torch::equal(DequantizeMatrix(g), DequantizeMatrix(q)));  // ...not changed
    EXPECT_FALSE(GroupQuantRows(g));                                      // once

    const std::vector<uint8_t> xq = Activations(Random(tokens, cols, 12));
    for (KernelPath path : {KernelPath::kBest, KernelPath::kBaseline, KernelPath::kPortable}) {
      std::vector<float> grouped(tokens * rows), by_rows(tokens * rows);
      QuantGroupsGemm(g.data_ptr<uint8_t>(), blocks, xq.data(), tokens, grouped.data(), rows, 0,
                      rows / 8, path);
      QuantGemm(QuantType::kQ4_0, q.data_ptr<uint8_t>(), blocks, xq.data(), tokens, by_rows.data(),
                rows, 0, rows, path);
      if (tokens > 1 && path != KernelPath::kPortable && QuantGroupsRowsHere()) {
        EXPECT_EQ(grouped, by_rows) << QuantKernelName() << " path " << static_cast<int>(path);
      }
      for (int64_t i = 0; i < tokens; ++i) {
        for (int64_t o = 0; o < rows; ++o) {
          const double want =
              ReferenceDot(QuantType::kQ4_0, q.data_ptr<uint8_t>() + o * blocks * 18,
                           xq.data() + i * blocks * 34, cols);
          EXPECT_NEAR(grouped[i * rows + o], want, 1e-5 * (std::fabs(want) + 1) * (cols / 320.0))
              << "path " << static_cast<int>(path) << " cols " << cols << " token " << i << " row "
              << o;
        }
      }
    }
    // Through the ATen product and an embedding's row lookup.
    const torch::Tensor x = Random(tokens, cols, 13);
    EXPECT_TRUE(torch::allclose(QuantMatmul(x, g), QuantMatmul(x, q), 1e-5, 1e-5));
    std::vector<float> row(cols);
    DequantizeMatrixRow(g, 13, row.data());
    EXPECT_TRUE(torch::equal(torch::from_blob(row.data(), {cols}), DequantizeMatrix(q)[13]));
  }
}

// The kernels chosen once for a decode product's pieces are the ones
// QuantGemm and QuantGroupsGemm run: one token's products, bit for bit, on
// every path, for a range of rows (grouped: of groups) inside the matrix.
TEST(QuantTest, OneTokenKernelsAreTheProductsKernels) {
  const int64_t rows = 48, cols = 320, blocks = cols / 32;
  for (QuantType t : {QuantType::kQ4_0, QuantType::kQ8_0}) {
    const torch::Tensor q = QuantizeMatrix(Random(rows, cols, 21), t).value();
    torch::Tensor g = q.clone();
    const bool grouped = t == QuantType::kQ4_0 && GroupQuantRows(g);
    const std::vector<uint8_t> xq = Activations(Random(1, cols, 22));
    std::vector<float> xd(blocks);
    std::vector<int32_t> xs(blocks);
    QuantActTerms(xq.data(), blocks, 1, xd.data(), xs.data());
    const QuantActs acts{xq.data(), blocks * 34, xd.data(), xs.data()};
    for (KernelPath path : {KernelPath::kBest, KernelPath::kBaseline, KernelPath::kPortable}) {
      const OneTokenKernels k = QuantOneTokenKernels(path);
      std::vector<float> want(rows, -1.0f), got(rows, -1.0f);
      QuantGemm(t, q.data_ptr<uint8_t>(), blocks, xq.data(), 1, want.data(), 0, 8, 40, path);
      k.rows(t, q.data_ptr<uint8_t>(), blocks, acts, 1, got.data(), 0, 8, 40);
      EXPECT_EQ(got, want) << QuantTypeName(t) << " rows, path " << static_cast<int>(path);
      if (!grouped) continue;
      std::fill(want.begin(), want.end(), -1.0f);
      std::fill(got.begin(), got.end(), -1.0f);
      QuantGroupsGemm(g.data_ptr<uint8_t>(), blocks, xq.data(), 1, want.data(), 0, 1, 5, path);
      k.groups(g.data_ptr<uint8_t>(), blocks, acts, 1, got.data(), 0, 1, 5);
      EXPECT_EQ(got, want) << "groups, path " << static_cast<int>(path);
      EXPECT_EQ(got[7], -1.0f);  // rows 8..39 only
      EXPECT_NE(got[8], -1.0f);
    }
  }
}

// A few tokens' Q8_0 products (a decode call's query rows over a Q8_0
// cache) read the rows where they lie; more tokens regroup them first. The
// two give each (row, token) the same bits: the first tokens of a long
// call equal a short call's, on every path, rows off a group of eight
// included. (One token is a GEMV's row form, with sums of its own.)
TEST(QuantTest, FewTokensQ8ProductsKeepTheRegroupedBits) {
  const int64_t rows = 45, cols = 320, blocks = cols / 32, tokens = 16;
  const torch::Tensor q = QuantizeMatrix(Random(rows, cols, 23), QuantType::kQ8_0).value();
  const std::vector<uint8_t> xq = Activations(Random(tokens, cols, 24));
  for (KernelPath path : {KernelPath::kBest, KernelPath::kBaseline, KernelPath::kPortable}) {
    std::vector<float> many(tokens * rows);
    QuantGemm(QuantType::kQ8_0, q.data_ptr<uint8_t>(), blocks, xq.data(), tokens, many.data(), rows,
              0, rows, path);
    for (int64_t few : {2, 3, 4}) {
      std::vector<float> got(few * rows);
      QuantGemm(QuantType::kQ8_0, q.data_ptr<uint8_t>(), blocks, xq.data(), few, got.data(), rows,
                0, rows, path);
      EXPECT_EQ(got, std::vector<float>(many.begin(), many.begin() + few * rows))
          << few << " tokens, path " << static_cast<int>(path);
    }
  }
}

// The prompt blocks follow the L2 a thread has (three quarters of it of
// activations, an eighth of weights, clamped), and no block size changes
// an output's bits: each output sums its row's blocks in one order.
TEST(QuantTest, PromptBlocksFollowTheL2AndLeaveTheBitsAlone) {
  auto blocks = [](int64_t l2) {
    const PromptBlocks b = PromptBlocksForL2(l2);
    return std::make_pair(b.act_bytes >> 10, b.weight_bytes >> 10);
  };
  EXPECT_EQ(blocks(int64_t{1} << 20), std::make_pair(int64_t{768}, int64_t{128}));
  EXPECT_EQ(blocks(int64_t{512} << 10), std::make_pair(int64_t{384}, int64_t{64}));
  EXPECT_EQ(blocks(int64_t{256} << 10), std::make_pair(int64_t{192}, int64_t{32}));
  EXPECT_EQ(blocks(int64_t{2} << 20), std::make_pair(int64_t{1024}, int64_t{256}));   // clamped
  EXPECT_EQ(blocks(int64_t{32} << 10), std::make_pair(int64_t{32}, int64_t{16}));     // clamped
  EXPECT_EQ(blocks(int64_t{64} << 20), std::make_pair(int64_t{1024}, int64_t{512}));  // clamped
  EXPECT_EQ(blocks(0), blocks(int64_t{1} << 20));  // unknown: 1 MiB assumed

  const int64_t cols = 4096, tokens = 67, rows = 72, blocks_a_row = cols / 32;
  const torch::Tensor q = QuantizeMatrix(Random(rows, cols, 21), QuantType::kQ4_0).value();
  torch::Tensor g = q.clone();
  ASSERT_TRUE(GroupQuantRows(g));
  const std::vector<uint8_t> xq = Activations(Random(tokens, cols, 22));
  auto products = [&](KernelPath path) {
    std::vector<float> grouped(tokens * rows), by_rows(tokens * rows);
    QuantGroupsGemm(g.data_ptr<uint8_t>(), blocks_a_row, xq.data(), tokens, grouped.data(), rows, 0,
                    rows / 8, path);
    QuantGemm(QuantType::kQ4_0, q.data_ptr<uint8_t>(), blocks_a_row, xq.data(), tokens,
              by_rows.data(), rows, 0, rows, path);
    return std::make_pair(grouped, by_rows);
  };
  for (KernelPath path : {KernelPath::kBest, KernelPath::kBaseline, KernelPath::kPortable}) {
    const auto as_sized = products(path);
    // 32 KiB of L2: blocks of 4 tokens and one group; 64 MiB: one block
    // of all; then a block of activations smaller than its weights'.
    for (const PromptBlocks& b :
         {PromptBlocksForL2(int64_t{32} << 10), PromptBlocksForL2(int64_t{64} << 20),
          PromptBlocks{int64_t{16} << 10, int64_t{40} << 10}}) {
      SetPromptBlocks(b);
      EXPECT_EQ(QuantPromptBlocks().act_bytes, b.act_bytes);
      EXPECT_EQ(QuantPromptBlocks().weight_bytes, b.weight_bytes);
      EXPECT_THAT(PromptBlocksDescription(), HasSubstr("set by SetPromptBlocks"));
      const auto resized = products(path);
      EXPECT_EQ(resized.first, as_sized.first)
          << b.act_bytes << " + " << b.weight_bytes << " path " << static_cast<int>(path);
      EXPECT_EQ(resized.second, as_sized.second)
          << b.act_bytes << " + " << b.weight_bytes << " path " << static_cast<int>(path);
    }
    SetPromptBlocks(std::nullopt);
    EXPECT_EQ(QuantPromptBlocks().act_bytes, PromptBlocksForL2(KernelCpuCaches().l2).act_bytes);
  }
  EXPECT_THAT(PromptBlocksDescription(),
              ::testing::AnyOf(HasSubstr("sysfs"), HasSubstr("sysconf"), HasSubstr("assumed")));
}

TEST(QuantTest, OnlyQ4MatricesOfWholeGroupsAreGrouped) {
  torch::Tensor odd = QuantizeMatrix(Random(45, 64, 14), QuantType::kQ4_0).value();
  torch::Tensor q8 = QuantizeMatrix(Random(48, 64, 15), QuantType::kQ8_0).value();
  torch::Tensor f32 = Random(48, 64, 16);
  const torch::Tensor odd_before = odd.clone(), q8_before = q8.clone();
  EXPECT_FALSE(GroupQuantRows(odd));
  EXPECT_FALSE(GroupQuantRows(q8));
  EXPECT_FALSE(GroupQuantRows(f32));
  EXPECT_TRUE(torch::equal(odd, odd_before));
  EXPECT_TRUE(torch::equal(q8, q8_before));
  EXPECT_EQ(QuantRows(odd), 45);
  EXPECT_EQ(QuantRows(f32), 48);
}

// A decode step's fused products over grouped matrices, split across
// threads at any row: each group computed once, by the share holding its
// first row, so every output is written and the bits are one thread's.
TEST(QuantTest, GroupedDecodeProductsSplitAnywhereAndKeepTheirBits) {
  torch::Tensor wq = QuantizeMatrix(Random(512, 512, 17), QuantType::kQ4_0).value();
  torch::Tensor wk = QuantizeMatrix(Random(136, 512, 18), QuantType::kQ4_0).value();
  torch::Tensor wv = QuantizeMatrix(Random(120, 512, 19), QuantType::kQ4_0).value();
  const torch::Tensor want =
      torch::cat({DequantizeMatrix(wq), DequantizeMatrix(wk), DequantizeMatrix(wv)})
          .matmul(Random(1, 512, 20).view({512}));
  for (torch::Tensor* w : {&wq, &wk, &wv}) ASSERT_TRUE(GroupQuantRows(*w));
  const torch::Tensor x = Random(1, 512, 20).view({512});
  auto products = [&](int threads) { return FusedProducts({&wq, &wk, &wv}, x, threads); };
  const torch::Tensor one = products(1);
  EXPECT_TRUE(torch::equal(products(2), one));
  EXPECT_TRUE(torch::equal(products(3), one));
  EXPECT_TRUE(torch::equal(products(4), one));
  EXPECT_EQ((one == 0).sum().item<int64_t>(), 0);
  EXPECT_LT((one - want).abs().max().item<float>(), 0.02 * want.abs().max().item<float>());
}

// A prompt's products over several matrices (grouped Q4_0, Q4_0 as stored
// with rows off a group, Q8_0) split in one by-demand pass over all their
// rows: on any number of threads each output is one thread's bits, and
// each matrix's the bits of its own product alone.
TEST(QuantTest, APromptsProductsSplitTogetherKeepOneThreadsBits) {
  torch::Tensor wq = QuantizeMatrix(Random(512, 512, 21), QuantType::kQ4_0).value();
  const torch::Tensor wk = QuantizeMatrix(Random(45, 512, 22), QuantType::kQ4_0).value();
  const torch::Tensor wv = QuantizeMatrix(Random(120, 512, 23), QuantType::kQ8_0).value();
  ASSERT_TRUE(GroupQuantRows(wq));
  const torch::Tensor x = Random(37, 512, 24);
  const int before = at::get_num_threads();
  auto many = [&](int threads) {
    at::set_num_threads(threads);
    std::vector<torch::Tensor> out = QuantMatmulMany(x, {wq, wk, wv});
    at::set_num_threads(before);
    return out;
  };
  at::set_num_threads(1);
  const std::vector<torch::Tensor> alone = {QuantMatmul(x, wq), QuantMatmul(x, wk),
                                            QuantMatmul(x, wv)};
  at::set_num_threads(before);
  const std::vector<torch::Tensor> one = many(1);
  ASSERT_EQ(one.size(), 3u);
  for (int threads : {2, 3, 4}) {
    const std::vector<torch::Tensor> split = many(threads);
    for (size_t m = 0; m < 3; ++m) {
      EXPECT_TRUE(torch::equal(split[m], one[m]))
          << "matrix " << m << ", " << threads << " threads";
    }
  }
  for (size_t m = 0; m < 3; ++m) {
    EXPECT_TRUE(torch::equal(one[m], alone[m])) << "matrix " << m;
    EXPECT_EQ((one[m] == 0).sum().item<int64_t>(), 0) << "matrix " << m;
  }
  const torch::Tensor want = x.matmul(DequantizeMatrix(wk).t());
  EXPECT_LT((one[1] - want).abs().max().item<float>(), 0.02 * want.abs().max().item<float>());
}

TEST(QuantTest, WidthsOffTheBlockAreRefusedByName) {
  const auto q = QuantizeMatrix(torch::zeros({4, 100}), QuantType::kQ4_0);
  ASSERT_FALSE(q.ok());
  EXPECT_THAT(q.status().message(),
              HasSubstr("its width 100 is not a multiple of the block size 32"));
  EXPECT_EQ(ParseQuantType("q4_0"), QuantType::kQ4_0);
  EXPECT_EQ(ParseQuantType("q5_k"), std::nullopt);
  EXPECT_EQ(QuantTypeOf(torch::zeros({4, 100})), std::nullopt);
}

TEST(QuantTest, VectorisedActivationsAreTheScalarBytes) {
  torch::Tensor x = Random(3, 256, 6);
  x[1].narrow(0, 32, 32).zero_();                // an all-zero block
  x[2].narrow(0, 0, 32).fill_(0.5).mul_(127.0);  // ties: x * 127 / amax lands on .5
  x[2][5] = 63.5;
  std::vector<uint8_t> a(3 * 8 * 34), b(3 * 8 * 34);
  QuantizeActivations(x.data_ptr<float>(), 3 * 256, a.data());
  QuantizeActivationsFast(x.data_ptr<float>(), 3 * 256, b.data());
  EXPECT_EQ(a, b) << QuantKernelName();
}

// A float matrix among quantized ones, or matrices of two widths, are
// refused by name before anything is read or allocated.
TEST(QuantTest, QuantMatmulRefusesAFloatMatrixAndMixedWidths) {
  const torch::Tensor x = torch::randn({3, 64});
  const torch::Tensor q = QuantizeMatrix(torch::randn({8, 64}), QuantType::kQ8_0).value();
  const torch::Tensor wide = QuantizeMatrix(torch::randn({8, 96}), QuantType::kQ8_0).value();
  try {
    QuantMatmulMany(x, {torch::randn({8, 64}), q});
    ADD_FAILURE() << "a float matrix was taken";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("w is not a quantized matrix"));
  }
  try {
    QuantMatmulMany(x, {q, wide});
    ADD_FAILURE() << "two widths were taken";
  } catch (const c10::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("must share their width"));
  }
}

TEST(QuantTest, AllZeroBlocksHaveZeroScaleAndZeroProducts) {
  const torch::Tensor q = QuantizeMatrix(torch::zeros({2, 64}), QuantType::kQ4_0).value();
  EXPECT_TRUE(torch::equal(DequantizeMatrix(q), torch::zeros({2, 64})));
  EXPECT_EQ(q[0][0][2].item<uint8_t>(), 0x88);  // 0 is level 8 in both nibbles
}

}  // namespace
}  // namespace hilnas
