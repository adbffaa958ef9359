#include "model/prompt_gemm.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <tuple>

#include "gtest/gtest.h"
#include "model/blas_core.h"
#include "model/decoder.h"
#include "model/test_archs.h"

namespace hilnas {
namespace {

// Restores the choice in force when a test ends.
class ChoiceScope {
 public:
  explicit ChoiceScope(PromptGemmChoice choice) : saved_(CurrentPromptGemmChoice()) {
    SetPromptGemmChoice(choice);
  }
  ~ChoiceScope() { SetPromptGemmChoice(saved_); }

 private:
  PromptGemmChoice saved_;
};

// Every shape's edges: one row and partial tiles of 6 rows, one column and
// partial tiles of 4, k below one vector, a vector's remainder, exactly one
// block of 512 and a second block; more threads than column blocks.
TEST(PromptGemmTest, AgreesWithTheDoubleProductAtEveryEdge) {
  if (!OwnPromptGemmAvailable()) GTEST_SKIP() << "no AVX-512F on this CPU";
  const int saved = at::get_num_threads();
  torch::manual_seed(35);
  for (int threads : {1, 3}) {
    at::set_num_threads(threads);
    for (torch::Dtype storage : {torch::kFloat, torch::kHalf, torch::kBFloat16}) {
      for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1},
                             {1, 67, 7},
                             {5, 3, 16},
                             {6, 4, 17},
                             {7, 5, 512},
                             {13, 33, 513},
                             {64, 70, 1100},
                             {2, 1, 1536}}) {
        const torch::Tensor w = torch::randn({n, k}).to(storage);
        const torch::Tensor x = torch::randn({m, k});
        const torch::Tensor wd = w.to(torch::kDouble), xd = x.to(torch::kDouble);
        const torch::Tensor want = torch::mm(xd, wd.t());
        const torch::Tensor scale = torch::mm(xd.abs(), wd.abs().t());
        torch::Tensor got = torch::full({m, n}, 1e30f);  // every output must be written
        ASSERT_TRUE(OwnPromptGemm(x.data_ptr<float>(), w.data_ptr(), *GemmWeightsFor(storage), m, n,
                                  k, got.data_ptr<float>()));
        const double error = ((got.to(torch::kDouble) - want).abs() / scale).max().item<double>();
        EXPECT_LT(error, 1e-6) << c10::toString(storage) << " " << m << "x" << n << "x" << k
                               << " threads " << threads;
      }
    }
  }
  at::set_num_threads(saved);
}

TEST(PromptGemmTest, ReadsF32F16AndBf16Only) {
  EXPECT_EQ(GemmWeightsFor(torch::kFloat), GemmWeights::kF32);
  EXPECT_EQ(GemmWeightsFor(torch::kHalf), GemmWeights::kF16);
  EXPECT_EQ(GemmWeightsFor(torch::kBFloat16), GemmWeights::kBF16);
  EXPECT_EQ(GemmWeightsFor(torch::kByte), std::nullopt);
  EXPECT_EQ(GemmWeightsFor(torch::kDouble), std::nullopt);
}

TEST(PromptGemmTest, DeclinesEmptyProducts) {
  float x = 1, w = 1, out = 0;
  EXPECT_FALSE(OwnPromptGemm(&x, &w, GemmWeights::kF32, 0, 1, 1, &out));
  EXPECT_FALSE(OwnPromptGemm(&x, &w, GemmWeights::kF32, 1, 0, 1, &out));
  EXPECT_FALSE(OwnPromptGemm(&x, &w, GemmWeights::kF32, 1, 1, 0, &out));
}

TEST(PromptGemmTest, TheChoiceDecidesWhoRunsThePrompt) {
  {
    ChoiceScope blas(PromptGemmChoice::kBlas);
    EXPECT_FALSE(UseOwnPromptGemm());
    EXPECT_EQ(PromptKernelsDescription(), BlasCoreDescription());
  }
  {
    ChoiceScope own(PromptGemmChoice::kOwn);
    EXPECT_EQ(UseOwnPromptGemm(), OwnPromptGemmAvailable());
    if (OwnPromptGemmAvailable()) {
      EXPECT_EQ(PromptKernelsDescription(),
                BlasCoreDescription() +
                    ", computed by hilnas's AVX-512 kernel instead (HILNAS_PROMPT_GEMM=own)");
    }
  }
  // Left to itself, hilnas runs its own product exactly when OpenBLAS's
  // core is narrower than the CPU (a host's OPENBLAS_CORETYPE=Haswell on an
  // AVX-512 EPYC, say).
  ChoiceScope automatic(PromptGemmChoice::kAuto);
  EXPECT_EQ(UseOwnPromptGemm(), OwnPromptGemmAvailable() && BlasCoreBelowCpu());
}

// A decoder's prompt through hilnas's product and through OpenBLAS's: the
// same logits to rounding, f32 and half weights (which the own product
// widens a block at a time), and not bit for bit the same (the own product
// did run: its sums are ordered differently).
TEST(PromptGemmTest, ADecodersPromptRunsOnItAndAgreesWithOpenBlas) {
  if (!OwnPromptGemmAvailable()) GTEST_SKIP() << "no AVX-512F on this CPU";
  Arch a = TinyMixedArch();
  a.d_model = 128;  // k of 128 and 256: whole vectors, several of them
  a.d_ffn = 256;
  a.head_dim = 32;
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = torch::randint(a.vocab_size, {1, 37}, torch::kLong);
  for (const char* weights : {"f32", "f16", "bf16"}) {
    auto decoder = Decoder::Create(a, 11, torch::kFloat);
    ASSERT_TRUE(decoder.ok()) << decoder.status();
    ASSERT_TRUE(decoder->StoreWeightsAs(weights).ok());
    torch::Tensor own, blas;
    {
      ChoiceScope scope(PromptGemmChoice::kOwn);
      own = decoder->Forward(tokens);
    }
    {
      ChoiceScope scope(PromptGemmChoice::kBlas);
      blas = decoder->Forward(tokens);
    }
    ASSERT_EQ(own.sizes(), blas.sizes());
    EXPECT_LT((own - blas).abs().max().item<double>(), 1e-4 * blas.abs().max().item<double>())
        << weights;
    EXPECT_FALSE(torch::equal(own, blas)) << weights;
  }
}

}  // namespace
}  // namespace hilnas
