#include "model/gemv.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "model/decoder.h"
#include "model/test_archs.h"

namespace hilnas {
namespace {

// The kernel against a double-precision product of the same (rounded)
// weights, for both half formats and sizes that are not multiples of the
// vector width.
TEST(WeightGemvTest, EqualsTheWidenedProduct) {
  torch::manual_seed(1);
  for (torch::Dtype storage : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    for (int64_t in : {1, 7, 32, 100, 513}) {
      auto w = torch::randn({67, in}).to(storage);
      auto x = torch::randn({in});
      auto want = torch::mv(w.to(torch::kDouble), x.to(torch::kDouble));
      auto got = WeightGemv(w, x);
      EXPECT_EQ(got.scalar_type(), torch::kFloat);
      EXPECT_LT((got.to(torch::kDouble) - want).abs().max().item<double>(), 1e-4 * std::sqrt(in))
          << "in " << in;
    }
  }
}

// Several matrices in one call, split across two threads at row ranges
// that straddle the matrices' borders (1024 f32 columns: 64 rows a
// thread), equal one product each.
TEST(WeightGemvTest, WidenIntoEqualsAtensConversionOnManyThreads) {
  // 300 x 1001: a tail that is not a vector's width, and more than one
  // thread's grain; subnormals, infinities and NaN among the values.
  torch::Tensor f = torch::randn({300, 1001}) * 100;
  f[0][0] = 1e-6;
  f[0][1] = -1e-7;
  f[1][0] = std::numeric_limits<float>::infinity();
  f[1][1] = std::numeric_limits<float>::quiet_NaN();
  for (torch::Dtype half : {torch::kHalf, torch::kBFloat16}) {
    const torch::Tensor w = f.to(half);
    torch::Tensor out = torch::empty({300, 1001});
    WidenInto(w, out.data_ptr<float>());
    EXPECT_TRUE(torch::equal(out.nan_to_num(7), w.to(torch::kFloat).nan_to_num(7))) << half;
    EXPECT_TRUE(std::isnan(out[1][1].item<float>()));
  }
}

TEST(WeightGemvTest, SeveralMatricesEqualOneProductEach) {
  torch::manual_seed(2);
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  for (torch::Dtype storage : {torch::kFloat, torch::kHalf}) {
    std::vector<torch::Tensor> ws = {torch::randn({37, 1024}).to(storage),
                                     torch::randn({200, 1024}).to(storage),
                                     torch::randn({5, 1024}).to(storage)};
    auto x = torch::randn({1, 1, 1024});
    std::vector<torch::Tensor> got = WeightGemvs(ws, x);
    ASSERT_EQ(got.size(), ws.size());
    for (size_t m = 0; m < ws.size(); ++m) {
      auto want = torch::mv(ws[m].to(torch::kDouble), x.reshape({-1}).to(torch::kDouble));
      ASSERT_EQ(got[m].sizes(), want.sizes());
      EXPECT_LT((got[m].to(torch::kDouble) - want).abs().max().item<double>(), 1e-3) << m;
    }
  }
  at::set_num_threads(threads);
}

// A decoder storing bf16 weights computes what an f32 decoder with the
// same weights rounded to bf16 computes: prefill (widened matrices) and
// decode (the kernel), token for token.
TEST(WeightGemvTest, DecoderWithHalfWeightsMatchesRoundedF32Weights) {
  Arch a = TinyMixedArch();
  for (torch::Dtype storage : {torch::kBFloat16, torch::kHalf}) {
    auto half = Decoder::Create(a, 11);
    auto rounded = Decoder::Create(a, 11);
    ASSERT_TRUE(half.ok() && rounded.ok());
    ASSERT_TRUE(half->StoreWeightsAs(storage).ok());
    {
      torch::NoGradGuard g;
      for (torch::Tensor& p : rounded->Parameters()) {
        if (p.dim() == 2) p.copy_(p.to(storage).to(torch::kFloat));
      }
    }
    for (const torch::Tensor& p : half->Parameters()) {
      if (p.dim() == 2) {
        EXPECT_EQ(p.scalar_type(), storage);
      }
    }
    torch::NoGradGuard g;
    auto tokens = torch::randint(0, a.vocab_size, {1, 12}, torch::kLong);
    KvCache c1 = half->NewCache(1, 16), c2 = rounded->NewCache(1, 16);
    auto l1 = half->ForwardCached(tokens, c1, false);
    auto l2 = rounded->ForwardCached(tokens, c2, false);
    EXPECT_LT((l1 - l2).abs().max().item<float>(), 1e-4);
    for (int step = 0; step < 3; ++step) {
      auto next = l2.narrow(1, l2.size(1) - 1, 1).argmax(-1);
      l1 = half->ForwardCached(next, c1, true);
      l2 = rounded->ForwardCached(next, c2, true);
      EXPECT_LT((l1 - l2).abs().max().item<float>(), 1e-4) << "step " << step;
    }
  }
}

TEST(WeightGemvTest, StoreWeightsAsRefusesWhatItCannotDo) {
  auto d = Decoder::Create(TinyMixedArch(), 1);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->StoreWeightsAs(torch::kFloat).code(), absl::StatusCode::kInvalidArgument);
  Arch s = TinyMhaArch();
  s.kv_cache = KvLayout::kSlim;
  auto slim_d = Decoder::Create(s, 1);
  ASSERT_TRUE(slim_d.ok());
  EXPECT_EQ(slim_d->StoreWeightsAs(torch::kBFloat16).code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace hilnas
