#include "quality/kvp_trainer.h"

#include <torch/torch.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;

Arch Base() {
  Arch a;
  a.name = "kvp-train-test";
  a.num_layers = 4;
  a.d_model = 64;
  a.d_ffn = 128;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 16;
  a.vocab_size = 32;
  a.attention.assign(4, Attention::kFull);
  Arch aux = a;
  aux.name = "kvp-train-test-aux";
  aux.num_layers = 2;
  aux.attention.assign(2, Attention::kFull);
  a.kv_prediction.kind = KvPredictionSpec::Kind::kCanonical;  // random auxiliary (KVP-C)
  a.kv_prediction.canonical = {aux};
  return a;
}

// A learnable sequence: a repeating pattern with a little structure.
TokenSplit Data() {
  std::vector<int32_t> ids;
  for (int i = 0; i < 6000; ++i) ids.push_back((i * 7 + (i / 13) % 5) % 32);
  return *SplitTokens(std::move(ids), 0.1, 40);
}

// Training pulls the predicted cache towards the base's own (consistency on
// held-out windows falls) and lowers the objective, with the base frozen.
// Whether the base's loss over the predicted cache beats a plain pruned
// model is a data question, measured on real text by bench/kvp_bench.
TEST(KvpTrainerTest, TrainingMovesThePredictedCacheTowardsTheBasesOwn) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(Base(), 1));
  auto base = std::make_shared<Decoder>(std::move(d));
  TrainOptions o;
  o.steps = 40;
  o.batch_size = 4;
  o.seq_len = 32;
  o.lr = 3e-3;
  o.warmup_steps = 4;
  o.eval_windows = 8;
  const TokenSplit data = Data();
  ASSERT_OK(Train(*base, nullptr, data, o).status());  // a base that knows the data
  const torch::Tensor before = base->NamedTensors()[1].second.clone();
  ASSERT_OK_AND_ASSIGN(KvPredictor kvp, KvPredictor::Create(base, 2));
  std::vector<int32_t> window(data.heldout.begin(), data.heldout.begin() + 33);
  const torch::Tensor held =
      torch::tensor(std::vector<int64_t>(window.begin(), window.end())).view({1, 33});
  auto consistency = [&] {
    torch::NoGradGuard no_grad;
    return kvp.Forward(held).consistency.item<double>();
  };
  const double c0 = consistency();
  double first = 0, last = 0;
  int evaluated = 0;
  ASSERT_OK_AND_ASSIGN(TrainResult r, TrainKvp(kvp, data, o, {}, [&](const TrainProgress& p) {
                         evaluated += !std::isnan(p.eval_loss);
                         (p.step == 1 ? first : last) = p.train_loss;
                       }));
  EXPECT_LT(consistency(), 0.7 * c0);
  EXPECT_LT(last, 0.7 * first);
  EXPECT_EQ(evaluated, 1);  // eval_every 0: at the end only
  EXPECT_TRUE(std::isfinite(r.initial_eval_loss) && std::isfinite(r.final_eval_loss));
  EXPECT_EQ(r.tokens, 40 * 4 * 32);
  EXPECT_TRUE(torch::equal(base->NamedTensors()[1].second, before));  // the base is frozen
}

TEST(KvpTrainerTest, RefusesTooFewTokens) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(Base(), 1));
  ASSERT_OK_AND_ASSIGN(KvPredictor kvp,
                       KvPredictor::Create(std::make_shared<Decoder>(std::move(d)), 2));
  TokenSplit tiny;
  tiny.train = {1, 2, 3};
  tiny.heldout = {1, 2, 3};
  TrainOptions o;
  EXPECT_THAT(TrainKvp(kvp, tiny, o), StatusIs(absl::StatusCode::kInvalidArgument,
                                               ::testing::HasSubstr("training tokens")));
}

}  // namespace
}  // namespace hilnas
