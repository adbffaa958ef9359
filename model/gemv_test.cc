#include "model/gemv.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/decoder.h"
#include "model/test_archs.h"
#include "util/cpu_features.h"

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

// Every form this CPU runs gives one-row's bits: for each storage, widths
// with and without tails past the last vector (and the last eight), row
// counts that leave rows short of two and four, and two threads splitting
// a matrix at rows that are not multiples of four.
TEST(GemvFormTest, EveryFormGivesTheSameBits) {
  torch::manual_seed(3);
  const int threads = at::get_num_threads();
  const std::vector<GemvForm> forms = GemvFormsHere();
#if defined(__x86_64__)
  if (KernelCpuFeatures().Avx2FmaF16c()) {
    EXPECT_GE(forms.size(), 3u);  // the side-by-side forms are checked here, not skipped
  }
#endif
  for (int nthreads : {1, 2}) {
    at::set_num_threads(nthreads);
    for (torch::Dtype storage : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      for (auto [rows, in] : std::vector<std::pair<int64_t, int64_t>>{{1, 8},
                                                                      {3, 24},
                                                                      {7, 37},
                                                                      {13, 100},
                                                                      {13, 36},
                                                                      {6, 531},
                                                                      {9, 1536},
                                                                      {301, 1001},
                                                                      {10, 104}}) {
        for (int draw = 0; draw < 4; ++draw) {  // one bit apart shows in some draws only
          const torch::Tensor w = torch::randn({rows, in}).to(storage);
          const torch::Tensor x = torch::randn({in});
          SetGemvForm(GemvForm::kOneRow);
          const torch::Tensor want = WeightGemv(w, x);
          for (GemvForm f : forms) {
            SetGemvForm(f);
            ASSERT_EQ(CurrentGemvForm(), f);
            EXPECT_TRUE(torch::equal(WeightGemv(w, x), want))
                << GemvFormName(f) << " " << storage << " " << rows << "x" << in << ", " << nthreads
                << " threads, draw " << draw;
          }
        }
      }
    }
  }
  SetGemvForm(GemvForm::kOneRow);
  at::set_num_threads(threads);
}

TEST(GemvFormTest, ChooseKeepsOneRowUnlessAnotherWinsByTheMargin) {
  using F = GemvForm;
  EXPECT_EQ(ChooseGemvForm({{F::kOneRow, 1.0}, {F::kTwoRows, 0.90}, {F::kFourRows, 0.95}}),
            F::kTwoRows);
  EXPECT_EQ(ChooseGemvForm({{F::kOneRow, 1.0}, {F::kTwoRows, 0.96}}), F::kOneRow);  // noise
  EXPECT_EQ(ChooseGemvForm({{F::kOneRowPrefetch, 1.2}, {F::kOneRow, 1.0}}), F::kOneRow);
  EXPECT_EQ(ChooseGemvForm({{F::kTwoRows, 0.5}}), F::kOneRow);  // no baseline: the default
  EXPECT_EQ(ChooseGemvForm({}), F::kOneRow);
}

TEST(GemvFormTest, NamesParseBack) {
  for (GemvForm f :
       {GemvForm::kOneRow, GemvForm::kOneRowPrefetch, GemvForm::kTwoRows, GemvForm::kFourRows}) {
    absl::StatusOr<GemvForm> back = ParseGemvForm(GemvFormName(f));
    ASSERT_TRUE(back.ok()) << GemvFormName(f);
    EXPECT_EQ(*back, f);
  }
  absl::StatusOr<GemvForm> bad = ParseGemvForm("three-rows");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("'three-rows'"));
}

// The tuner times every form over the matrices it can run (not the 1-D
// norm, not the quantized blocks), picks by ChooseGemvForm, and leaves its
// pick as the process's form.
TEST(GemvFormTest, TuneTimesEveryFormAndSetsItsPick) {
  Arch a = TinyMixedArch();
  auto d = Decoder::Create(a, 5);
  ASSERT_TRUE(d.ok());
  std::vector<torch::Tensor> mats;
  int64_t bytes = 0;
  for (const auto& [name, t] : d->NamedTensors()) {
    mats.push_back(t);
    if (t.dim() == 2) bytes += t.nbytes();
  }
  mats.push_back(torch::zeros({4, 64, 18}, torch::kUInt8));  // Q4_0-like blocks: skipped
  SetGemvForm(GemvForm::kOneRow);
  const GemvTuning tuning = TuneGemvForm(mats);
  EXPECT_EQ(tuning.bytes, bytes);
  EXPECT_EQ(CurrentGemvForm(), tuning.chosen);
  const std::vector<GemvForm> forms = GemvFormsHere();
  if (forms.size() > 1) {
    ASSERT_EQ(tuning.times.size(), forms.size());
    for (const GemvFormTime& t : tuning.times) EXPECT_GT(t.median_ms, 0) << GemvFormName(t.form);
    EXPECT_EQ(tuning.chosen, ChooseGemvForm(tuning.times));
    EXPECT_GE(tuning.passes, 3);
    EXPECT_THAT(tuning.Describe(), ::testing::HasSubstr("one-row "));
  } else {
    EXPECT_TRUE(tuning.times.empty());
    EXPECT_EQ(tuning.chosen, GemvForm::kOneRow);
  }
  SetGemvForm(GemvForm::kOneRow);
}

}  // namespace
}  // namespace hilnas
