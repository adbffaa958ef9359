#include "model/kv_prediction.h"

#include <torch/torch.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

Arch Small() {
  Arch a;
  a.name = "kvp-test";
  a.num_layers = 4;
  a.d_model = 64;
  a.d_ffn = 128;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 16;
  a.vocab_size = 64;
  a.qk_norm = true;  // keys are predicted before the K-norm
  a.attention = {Attention::kFull, Attention::kSlidingWindow, Attention::kSkip, Attention::kFull};
  a.sliding_window = 8;
  return a;
}

torch::Tensor Tokens(int64_t t) { return torch::arange(t, torch::kLong).remainder(61).view({1, t}); }

// KV Prediction with the base as its own auxiliary model and identity maps:
// the predicted cache is the base's own, so outputs equal the base's.
TEST(KvPredictorTest, IdentityPredictorReproducesTheBase) {
  Arch a = Small();
  a.kv_prediction.kind = KvPredictionSpec::Kind::kCanonical;
  a.kv_prediction.canonical = {Small()};
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(a, 1));
  auto base = std::make_shared<Decoder>(std::move(d));
  ASSERT_OK_AND_ASSIGN(KvPredictor kvp, KvPredictor::Create(base, 2, base));
  EXPECT_EQ(kvp.layer_map(), (std::vector<int>{0, 1, 2, 3}));
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = Tokens(20);
  KvPredictor::Outputs o = kvp.Forward(tokens);
  const torch::Tensor plain = base->Forward(tokens);
  EXPECT_TRUE(torch::allclose(o.base_logits, plain, 1e-5, 1e-5));
  EXPECT_LT(o.consistency.item<double>(), 1e-6);

  std::vector<int64_t> prompt(30);
  for (int i = 0; i < 30; ++i) prompt[i] = (7 * i + 3) % 64;
  GenerateOptions go;
  go.max_new_tokens = 6;
  ASSERT_OK_AND_ASSIGN(Generation want, GreedyGenerate(*base, prompt, go));
  ASSERT_OK_AND_ASSIGN(Generation got, kvp.Generate(prompt, go));
  EXPECT_EQ(got.tokens, want.tokens);
}

TEST(KvPredictorTest, LayerPrunedAuxiliaryStartsAsTheRetainedLayers) {
  Arch a = Small();
  a.attention = {Attention::kFull, Attention::kFull, Attention::kFull, Attention::kFull};
  a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
  a.kv_prediction.layer_pruned_ratio = 0.5;  // keeps layers 0 and 2 (App. A)
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(a, 1));
  auto base = std::make_shared<Decoder>(std::move(d));
  ASSERT_OK_AND_ASSIGN(KvPredictor kvp, KvPredictor::Create(base, 2));
  EXPECT_EQ(kvp.auxiliary().arch().num_layers, 2);
  EXPECT_EQ(kvp.layer_map(), (std::vector<int>{0, 0, 1, 1}));  // latest kept at or before
  std::map<std::string, torch::Tensor> b, x;
  for (auto& [n, t] : base->NamedTensors()) b[n] = t;
  for (auto& [n, t] : kvp.auxiliary().NamedTensors()) x[n] = t;
  EXPECT_TRUE(torch::equal(x["model.layers.1.mlp.up_proj.weight"], b["model.layers.2.mlp.up_proj.weight"]));
  EXPECT_TRUE(torch::equal(x["model.embed_tokens.weight"], b["model.embed_tokens.weight"]));
  // Mapped base layers 0 and 2 are predicted exactly by the copied layers'
  // own K/V only at the first layer (later ones see a different residual).
  torch::NoGradGuard no_grad;
  KvPredictor::Outputs o = kvp.Forward(Tokens(16));
  EXPECT_GT(o.consistency.item<double>(), 0);
}

TEST(KvPredictorTest, TrainingLowersTheLossAndLeavesTheBaseFrozen) {
  Arch a = Small();
  a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
  a.kv_prediction.layer_pruned_ratio = 0.5;
  a.attention = {Attention::kFull, Attention::kFull, Attention::kFull, Attention::kFull};
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(a, 1));
  auto base = std::make_shared<Decoder>(std::move(d));
  const torch::Tensor before = base->NamedTensors()[3].second.clone();
  ASSERT_OK_AND_ASSIGN(KvPredictor kvp, KvPredictor::Create(base, 2));
  torch::optim::Adam opt(kvp.TrainableParameters(), torch::optim::AdamOptions(3e-3));
  const torch::Tensor tokens = Tokens(33).repeat({4, 1});
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    opt.zero_grad();
    torch::Tensor loss = kvp.Loss(tokens);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.8 * first);
  EXPECT_TRUE(torch::equal(base->NamedTensors()[3].second, before));
}

}  // namespace
}  // namespace hilnas
