#include "search_space/arch.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

Arch Tiny() {
  Arch a;
  a.name = "tiny";
  a.num_layers = 3;
  a.d_model = 256;
  a.d_ffn = 512;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 32;
  a.vocab_size = 100;
  a.attention = {Attention::kFull, Attention::kSlidingWindow, Attention::kSkip};
  a.sliding_window = 16;
  return a;
}

absl::Status Check(const Arch& a, int block = 0) {
  ValidateOptions o;
  o.block_size = block;
  return ValidateArch(a, o);
}

TEST(ValidateArchTest, AcceptsAValidArch) { EXPECT_OK(Check(Tiny(), 128)); }

TEST(ValidateArchTest, RejectsKvHeadsThatDoNotDivideHeads) {
  Arch a = Tiny();
  a.num_kv_heads = 3;
  EXPECT_THAT(Check(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("num_kv_heads 3 does not divide num_heads 4")));
}

TEST(ValidateArchTest, RejectsWidthsOffTheBlockGrid) {
  Arch a = Tiny();
  a.d_ffn = 3000;
  a.d_model = 200;
  EXPECT_THAT(
      Check(a, 128),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::AllOf(HasSubstr("d_ffn 3000 is not a multiple of block size 128"),
                                HasSubstr("d_model 200 is not a multiple of block size 128"))));
}

TEST(ValidateArchTest, RejectsPatternOfWrongLength) {
  Arch a = Tiny();
  a.attention.pop_back();
  EXPECT_THAT(Check(a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("attention pattern has 2 entries, expected num_layers 3")));
}

TEST(ValidateArchTest, RejectsSlidingWindowLayerWithoutWindow) {
  Arch a = Tiny();
  a.sliding_window = 0;
  EXPECT_THAT(Check(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("sliding_window 0 must be positive")));
}

TEST(ValidateArchTest, RejectsNonPositiveSizes) {
  Arch a = Tiny();
  a.d_ffn = 0;
  a.vocab_size = -1;
  EXPECT_THAT(Check(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                 ::testing::AllOf(HasSubstr("d_ffn 0 must be positive"),
                                                  HasSubstr("vocab_size -1 must be positive"))));
}

TEST(ValidateArchTest, RejectsOddHeadDim) {
  Arch a = Tiny();
  a.head_dim = 33;
  EXPECT_THAT(Check(a),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("head_dim 33 must be even")));
}

TEST(ValidateArchTest, RejectsSlimCacheOnGroupedQueryAttention) {
  Arch a = Tiny();
  a.kv_cache = KvLayout::kSlim;
  EXPECT_THAT(Check(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("kv_cache SLIM needs multi-head attention")));
  a.num_kv_heads = 4;
  a.head_dim = 64;  // 4 x 64 == d_model 256
  EXPECT_OK(Check(a));
}

TEST(ValidateArchTest, RejectsBadLayerPrunedRatio) {
  Arch a = Tiny();
  a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
  a.kv_prediction.layer_pruned_ratio = 1.5;
  EXPECT_THAT(Check(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("layer_pruned_ratio 1.5 is not in (0, 1)")));
}

TEST(ValidateArchTest, RejectsLayerMapPointingPastTheAuxiliary) {
  Arch a = Tiny();
  a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
  a.kv_prediction.layer_pruned_ratio = 0.5;  // keeps layers 0 and 2
  a.kv_prediction.layer_map = {0, 1, 2};
  EXPECT_THAT(Check(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("layer_map[2] 2 is not an auxiliary layer (0..1)")));
}

TEST(ValidateArchTest, RejectsCanonicalAuxiliaryWithOtherVocabulary) {
  Arch a = Tiny();
  Arch aux = Tiny();
  aux.num_layers = 1;
  aux.attention = {Attention::kFull};
  aux.vocab_size = 50;
  a.kv_prediction.kind = KvPredictionSpec::Kind::kCanonical;
  a.kv_prediction.canonical = {aux};
  EXPECT_THAT(Check(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                 HasSubstr("canonical.vocab_size 50 differs from the base's 100")));
}

TEST(ArchFromProtoTest, DerivesHeadDimWhenUnset) {
  ArchSpec p = ArchToProto(Tiny());
  p.set_head_dim(0);
  ASSERT_OK_AND_ASSIGN(Arch a, ArchFromProto(p));
  EXPECT_EQ(a.head_dim, 64);
  p.set_d_model(250);
  EXPECT_THAT(ArchFromProto(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("d_model 250 is not divisible by num_heads 4")));
}

TEST(ArchFromProtoTest, RejectsUnspecifiedAttention) {
  ArchSpec p = ArchToProto(Tiny());
  p.set_attention(1, ATTENTION_UNSPECIFIED);
  EXPECT_THAT(ArchFromProto(p), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("attention[1] ATTENTION_UNSPECIFIED")));
}

TEST(ArchFromProtoTest, ProtoRoundTripIsExact) {
  Arch a = Tiny();
  a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
  a.kv_prediction.layer_pruned_ratio = 0.5;
  ASSERT_OK_AND_ASSIGN(Arch back, ArchFromProto(ArchToProto(a)));
  EXPECT_EQ(ArchToProto(back).SerializeAsString(), ArchToProto(a).SerializeAsString());
}

TEST(PatternTest, ParsesAndPrints) {
  ASSERT_OK_AND_ASSIGN(auto p, ParsePattern("FWSF"));
  EXPECT_EQ(PatternString(p), "FWSF");
  EXPECT_THAT(ParsePattern("FXF"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("character 1 'X'")));
}

TEST(PatternTest, LongestEfficientRunCountsSwaAndSkipTogether) {
  ASSERT_OK_AND_ASSIGN(auto p, ParsePattern("FSWFSSWF"));
  EXPECT_EQ(LongestEfficientRun(p), 3);
}

// KV Prediction App. A, Tab. 4 (OpenELM 1.1B has 28 layers).
TEST(KvPredictionTest, LayerPrunedKeepsEveryKthLayer) {
  ASSERT_OK_AND_ASSIGN(auto k75, LayerPrunedKeptLayers(28, 0.75));
  EXPECT_THAT(
      k75, ElementsAre(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, 16, 17, 18, 20, 21, 22, 24, 25, 26));
  ASSERT_OK_AND_ASSIGN(auto k25, LayerPrunedKeptLayers(36, 0.25));
  EXPECT_THAT(k25, ElementsAre(0, 4, 8, 12, 16, 20, 24, 28, 32));
}

TEST(KvPredictionTest, MapsAvoidAuxiliarySkipLayers) {
  // LP-0.5 of F S F F keeps layers 0 and 2 (F, F) -- fine; of S F F F it
  // keeps S and F: base layers 0 and 1 would map to the skip layer 0 and
  // take auxiliary layer 1 instead.
  Arch a = Tiny();
  a.num_layers = 4;
  a.attention = {Attention::kSkip, Attention::kFull, Attention::kFull, Attention::kFull};
  a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
  a.kv_prediction.layer_pruned_ratio = 0.5;
  ASSERT_OK_AND_ASSIGN(std::vector<int> map, KvPredictionLayerMap(a));
  EXPECT_EQ(map, (std::vector<int>{0, 1, 1, 1}));  // layer 0 is a skip layer itself: any entry
  a.attention = {Attention::kSkip, Attention::kFull, Attention::kSkip, Attention::kFull};
  EXPECT_THAT(ValidateArch(a),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("keeps no attention layer")));
}

TEST(ValidateArchTest, PipelinedDecodingNeedsTheTheoremsLayerRange) {
  Arch a = Tiny();
  a.num_layers = 8;
  a.attention.assign(8, Attention::kFull);
  a.ppd = {4, 3};
  EXPECT_OK(ValidateArch(a));
  a.ppd = {3, 1};
  EXPECT_THAT(ValidateArch(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("ppd.layer 3 is outside [4, 7]")));
  a.ppd = {8, 1};
  EXPECT_THAT(ValidateArch(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("ppd.layer 8 is outside [4, 7]")));
  a.ppd = {5, 0};
  EXPECT_THAT(ValidateArch(a),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ppd.k 0 must be in 1..")));
  a.ppd = {5, 1, 1.5};
  EXPECT_THAT(ValidateArch(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                        HasSubstr("ppd.timing_match_rate 1.5 is outside")));
  a.ppd = {5, 2, 0.7};
  ASSERT_OK_AND_ASSIGN(Arch back, ArchFromProto(ArchToProto(a)));
  EXPECT_EQ(back.ppd.layer, 5);
  EXPECT_EQ(back.ppd.k, 2);
  EXPECT_DOUBLE_EQ(back.ppd.timing_match_rate, 0.7);
}

}  // namespace
}  // namespace hilnas
