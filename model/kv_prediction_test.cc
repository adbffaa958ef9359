#include "model/kv_prediction.h"

#include <torch/torch.h>

#include <filesystem>

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

torch::Tensor Tokens(int64_t t) {
  return torch::arange(t, torch::kLong).remainder(61).view({1, t});
}

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
  EXPECT_TRUE(
      torch::equal(x["model.layers.1.mlp.up_proj.weight"], b["model.layers.2.mlp.up_proj.weight"]));
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

TEST(KvPredictorTest, LossWeightsFollowEquation2) {
  Arch a = Small();
  a.attention.assign(4, Attention::kFull);
  a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
  a.kv_prediction.layer_pruned_ratio = 0.5;
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(a, 1));
  ASSERT_OK_AND_ASSIGN(KvPredictor kvp,
                       KvPredictor::Create(std::make_shared<Decoder>(std::move(d)), 2));
  torch::NoGradGuard no_grad;
  const torch::Tensor tokens = Tokens(17);
  KvPredictor::Outputs o = kvp.Forward(tokens.narrow(1, 0, 16));
  auto ce = [&](const torch::Tensor& logits) {
    return torch::nn::functional::cross_entropy(logits.reshape({-1, 64}),
                                                tokens.narrow(1, 1, 16).reshape({-1}))
        .item<double>();
  };
  const double base = ce(o.base_logits), aux = ce(o.aux_logits), l1 = o.consistency.item<double>();
  EXPECT_NEAR(kvp.Loss(tokens, 0, 0).item<double>(), base, 1e-5);
  EXPECT_NEAR(kvp.Loss(tokens, 2, 0.5).item<double>(), base + 0.5 * aux + 2 * l1, 1e-5);
  EXPECT_NEAR(kvp.Loss(tokens).item<double>(), base + aux + l1 / 4, 1e-5);  // lambda_C = 1/n_B
}

TEST(KvPredictorTest, CheckpointsRoundTripForBothAuxiliaryKinds) {
  for (const bool canonical : {false, true}) {
    Arch a = Small();
    a.attention.assign(4, Attention::kFull);
    if (canonical) {
      Arch aux = Small();
      aux.name = "kvp-test-aux";
      aux.num_layers = 2;
      aux.d_ffn = 64;
      aux.attention.assign(2, Attention::kFull);
      a.kv_prediction.kind = KvPredictionSpec::Kind::kCanonical;
      a.kv_prediction.canonical = {aux};
    } else {
      a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
      a.kv_prediction.layer_pruned_ratio = 0.5;
    }
    ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(a, 1));
    ASSERT_OK_AND_ASSIGN(KvPredictor kvp,
                         KvPredictor::Create(std::make_shared<Decoder>(std::move(d)), 2));
    {  // make the maps something other than their initial value
      torch::NoGradGuard no_grad;
      for (auto& [n, t] : kvp.PredictorTensors()) t.add_(0.01);
    }
    const std::string dir = ::testing::TempDir() + "/kvp_ckpt_" + (canonical ? "c" : "lp");
    std::filesystem::remove_all(dir);
    ASSERT_OK(SaveKvpCheckpoint(kvp, dir, StorageDtype::kF32));
    ASSERT_OK_AND_ASSIGN(KvPredictor back, LoadKvpCheckpoint(dir));
    EXPECT_EQ(back.base().arch().kv_prediction.kind, a.kv_prediction.kind);
    EXPECT_EQ(back.layer_map(), kvp.layer_map());
    torch::NoGradGuard no_grad;
    const torch::Tensor tokens = Tokens(12);
    EXPECT_TRUE(torch::equal(back.Forward(tokens).base_logits, kvp.Forward(tokens).base_logits))
        << (canonical ? "KVP-C" : "KVP-LP");
    // The base alone loads in any Llama tool: a plain checkpoint.
    ASSERT_OK(LoadCheckpoint(dir).status());
    std::filesystem::remove(dir + "/kv_predictor.safetensors");
    EXPECT_THAT(LoadKvpCheckpoint(dir),
                ::hilnas::testing::StatusIs(absl::StatusCode::kNotFound,
                                            ::testing::HasSubstr("kv_predictor.safetensors")));
  }
}

}  // namespace
}  // namespace hilnas
