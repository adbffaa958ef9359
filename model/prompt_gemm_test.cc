#include "model/prompt_gemm.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "model/blas_core.h"
#include "model/decoder.h"
#include "model/test_archs.h"

namespace hilnas {
namespace {

// Restores the choice in force, and kAuto's pick, when a test ends.
class ChoiceScope {
 public:
  explicit ChoiceScope(PromptGemmChoice choice)
      : saved_(CurrentPromptGemmChoice()), saved_pick_(AutoPromptGemm()) {
    SetPromptGemmChoice(choice);
  }
  ~ChoiceScope() {
    SetPromptGemmChoice(saved_);
    SetAutoPromptGemm(saved_pick_);
  }

 private:
  PromptGemmChoice saved_;
  std::optional<bool> saved_pick_;
};

// Every shape's edges: one row and partial tiles of 14 rows, one column,
// partial panels of 32 columns on either side of 16, k below one vector
// (the packing's 16 x 16 blocks), a vector's remainder, exactly one block
// of 512 and a second block; several chunks of columns; more threads than
// chunks.
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
                             {2, 1, 1536},
                             {14, 32, 16},
                             {15, 17, 31},
                             {29, 48, 1024},
                             {28, 160, 100},
                             {3, 129, 33}}) {
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

// One thread takes every column, blocked 128 at a time as a thread's
// chunk is: each output the same sum in k's order on 1, 2 or 3 threads.
TEST(PromptGemmTest, AnyNumberOfThreadsGivesTheSameBits) {
  if (!OwnPromptGemmAvailable()) GTEST_SKIP() << "no AVX-512F on this CPU";
  const int saved = at::get_num_threads();
  torch::manual_seed(36);
  const int64_t m = 30, n = 300, k = 1100;
  const torch::Tensor w = torch::randn({n, k}), x = torch::randn({m, k});
  std::vector<torch::Tensor> outs;
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    outs.push_back(torch::empty({m, n}));
    ASSERT_TRUE(OwnPromptGemm(x.data_ptr<float>(), w.data_ptr(), GemmWeights::kF32, m, n, k,
                              outs.back().data_ptr<float>()));
  }
  at::set_num_threads(saved);
  EXPECT_TRUE(torch::equal(outs[0], outs[1]));
  EXPECT_TRUE(torch::equal(outs[0], outs[2]));
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
  // Left to itself and untimed, hilnas runs its own product exactly when
  // OpenBLAS's core is narrower than the CPU (a host's
  // OPENBLAS_CORETYPE=Haswell on an AVX-512 EPYC, say); once a pick is set
  // (TunePromptGemm's), the pick.
  ChoiceScope automatic(PromptGemmChoice::kAuto);
  SetAutoPromptGemm(std::nullopt);
  EXPECT_EQ(UseOwnPromptGemm(), OwnPromptGemmAvailable() && BlasCoreBelowCpu());
  for (bool own : {true, false}) {
    SetAutoPromptGemm(own);
    EXPECT_EQ(AutoPromptGemm(), own);
    EXPECT_EQ(UseOwnPromptGemm(), own && OwnPromptGemmAvailable());
  }
  // A choice named in the environment outranks the pick.
  SetPromptGemmChoice(PromptGemmChoice::kBlas);
  SetAutoPromptGemm(true);
  EXPECT_FALSE(UseOwnPromptGemm());
}

// The tuner times both products on the matrices at hand (f32 and half
// ones, not quantized bytes), sets kAuto's pick to the faster and says so;
// under a choice named in the environment it times nothing.
TEST(PromptGemmTest, TheTunerPicksTheFasterProductUnderAuto) {
  torch::manual_seed(3);
  const std::vector<torch::Tensor> matrices = {
      torch::randn({96, 64}), torch::randn({40, 64}).to(torch::kHalf),
      torch::randint(0, 255, {8, 34}, torch::kByte), torch::randn({64, 96}).to(torch::kBFloat16)};
  {
    ChoiceScope blas(PromptGemmChoice::kBlas);
    const PromptGemmTuning t = TunePromptGemm(matrices);
    EXPECT_FALSE(t.timed);
    if (OwnPromptGemmAvailable()) {
      EXPECT_EQ(t.Describe(), "OpenBLAS (HILNAS_PROMPT_GEMM=blas)");
    }
  }
  ChoiceScope automatic(PromptGemmChoice::kAuto);
  SetAutoPromptGemm(std::nullopt);
  const PromptGemmTuning t = TunePromptGemm(matrices);
  if (!OwnPromptGemmAvailable()) {
    EXPECT_FALSE(t.timed);
    EXPECT_EQ(AutoPromptGemm(), std::nullopt);
    return;
  }
  ASSERT_TRUE(t.timed) << t.Describe();
  EXPECT_EQ(t.weights, 96 * 64 + 40 * 64 + 64 * 96);  // the byte matrix is not timed
  EXPECT_EQ(t.rows, 128);
  EXPECT_GE(t.passes, 3);
  EXPECT_LE(t.passes, 9);
  EXPECT_GT(t.own_ms, 0);
  EXPECT_GT(t.blas_ms, 0);
  EXPECT_EQ(t.own, t.own_ms < t.blas_ms);
  EXPECT_EQ(AutoPromptGemm(), t.own);
  EXPECT_EQ(UseOwnPromptGemm(), t.own);
  EXPECT_NE(t.Describe().find(t.own ? "hilnas's AVX-512 kernel (own " : "OpenBLAS (own "),
            std::string::npos)
      << t.Describe();
  // A matrix past the 8M weights' budget is timed on its first rows only: a
  // 128K-vocabulary head is not seconds of products at every Prepare.
  const torch::Tensor head = torch::zeros({(int64_t{9} << 20) / 512, 512});
  const PromptGemmTuning big = TunePromptGemm({torch::zeros({64, 512}), head});
  ASSERT_TRUE(big.timed);
  EXPECT_EQ(big.weights, int64_t{8} << 20);
}

// A decoder's prompt through hilnas's product and through OpenBLAS's: the
// same logits to rounding, f32 and half weights (which the own product
// widens as it packs them), and every one of the prompt's products ran on
// the own product under kOwn and none under kBlas. (Both sum in k's order,
// so the logits may agree bit for bit.)
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
    const int64_t before = OwnPromptGemmCalls();
    {
      ChoiceScope scope(PromptGemmChoice::kOwn);
      own = decoder->Forward(tokens);
    }
    const int64_t ran = OwnPromptGemmCalls() - before;
    // Gate, up and down a layer, q, k, v and o where it attends, and the
    // head's.
    int64_t products = 1;
    for (Attention kind : a.attention) products += kind == Attention::kSkip ? 3 : 7;
    EXPECT_EQ(ran, products) << weights;
    {
      ChoiceScope scope(PromptGemmChoice::kBlas);
      blas = decoder->Forward(tokens);
    }
    EXPECT_EQ(OwnPromptGemmCalls() - before, ran) << weights;
    ASSERT_EQ(own.sizes(), blas.sizes());
    EXPECT_LT((own - blas).abs().max().item<double>(), 1e-4 * blas.abs().max().item<double>())
        << weights;
  }
}

}  // namespace
}  // namespace hilnas
