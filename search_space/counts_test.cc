#include "search_space/counts.h"

#include "gtest/gtest.h"

namespace hilnas {
namespace {

// Hand-sized model: 2 layers, d_model 8, d_ffn 16, 2 heads of 4, 1 KV head,
// vocabulary 10, QK-norm, layer 0 full attention, layer 1 skip.
Arch HandSized() {
  Arch a;
  a.num_layers = 2;
  a.d_model = 8;
  a.d_ffn = 16;
  a.num_heads = 2;
  a.num_kv_heads = 1;
  a.head_dim = 4;
  a.vocab_size = 10;
  a.tie_embeddings = true;
  a.qk_norm = true;
  a.attention = {Attention::kFull, Attention::kSkip};
  a.sliding_window = 2;
  return a;
}

TEST(CountParametersTest, MatchesHandCount) {
  const ParameterCount c = CountParameters(HandSized());
  EXPECT_EQ(c.embedding, 80);   // 10 x 8
  EXPECT_EQ(c.output_head, 0);  // tied
  EXPECT_EQ(c.attention, 192);  // q 64 + k 32 + v 32 + o 64, one layer
  EXPECT_EQ(c.ffn, 768);        // 2 layers x 3 x 8 x 16
  EXPECT_EQ(c.norms, 40);       // final 8 + FFN 2x8 + attention 8 + QK 2x4
  EXPECT_EQ(c.model(), 1080);
}

TEST(CountParametersTest, UntiedHeadAddsAnEmbeddingMatrix) {
  Arch a = HandSized();
  a.tie_embeddings = false;
  EXPECT_EQ(CountParameters(a).model(), 1160);
}

TEST(FlopsTest, PrefillMatchesHandCount) {
  // Layer 0: FFN 2*384*3 + projections 2*192*3 + scores 4*8*(1+2+3);
  // layer 1: FFN only; head for the last position 2*10*8.
  EXPECT_DOUBLE_EQ(PrefillFlops(HandSized(), 3), 2304 + 1152 + 192 + 2304 + 160);
}

TEST(FlopsTest, SlidingWindowCapsVisibleKeys) {
  Arch a = HandSized();
  a.attention[0] = Attention::kSlidingWindow;  // window 2: keys 1+2+2
  EXPECT_DOUBLE_EQ(PrefillFlops(a, 3), 2304 + 1152 + 4 * 8 * 5 + 2304 + 160);
}

TEST(FlopsTest, DecodeStepMatchesHandCount) {
  // Context 3: the new token sees 4 keys in layer 0.
  EXPECT_DOUBLE_EQ(DecodeFlops(HandSized(), 3), 768 + 384 + 4 * 8 * 4 + 768 + 160);
}

TEST(FlopsTest, KvPredictionPrefillUsesTheAuxiliary) {
  Arch a = HandSized();
  a.attention = {Attention::kFull, Attention::kFull};
  a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
  a.kv_prediction.layer_pruned_ratio = 0.5;  // auxiliary keeps layer 0
  // Predictor: 2 attention layers x (K and V) x (4 + 1) x 4.
  EXPECT_EQ(CountParameters(a).predictor, 80);
  // Aux layer 3648 + predictor 2*80*3 + one base step at context 2
  // (2 x (768 + 384 + 4*8*3) + head 160).
  EXPECT_DOUBLE_EQ(PrefillFlops(a, 3), 3648 + 480 + 2656);
}

TEST(KvCacheBytesTest, CountsOnlyAttentionLayersAndTheWindow) {
  Arch a = HandSized();
  EXPECT_EQ(KvCacheBytes(a, 5, 2), 2 * 4 * 5 * 2);  // K and V, 1 KV head of 4, bf16
  a.attention[0] = Attention::kSlidingWindow;
  EXPECT_EQ(KvCacheBytes(a, 5, 2), 2 * 4 * 2 * 2);  // window of 2 tokens
}

TEST(KvCacheBytesTest, SlimCacheHalvesTheBytes) {
  Arch a = HandSized();
  a.num_kv_heads = 2;
  const int64_t standard = KvCacheBytes(a, 100, 2);
  a.kv_cache = KvLayout::kSlim;
  EXPECT_EQ(KvCacheBytes(a, 100, 2) * 2, standard);
}

TEST(KvCacheBytesTest, PipelinedDecodingAddsACachePerCandidateForTheSubLayers) {
  Arch a = HandSized();
  a.attention.assign(a.num_layers, Attention::kFull);
  const int64_t plain = KvCacheBytes(a, 100, 4);
  a.ppd = {a.num_layers - 1, 3};  // each of 3 subs runs the first layer
  EXPECT_EQ(KvCacheBytes(a, 100, 4), plain + 3 * plain / a.num_layers);
}

}  // namespace
}  // namespace hilnas
