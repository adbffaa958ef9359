#include "search_space/space.h"

#include <cmath>
#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

// A space small enough to enumerate: 3 or 4 layers, two widths each, all
// three attention types, at most 2 consecutive efficient layers.
SearchSpace SmallProto() {
  SearchSpace s = DefaultSearchSpace();
  s.mutable_num_layers()->Clear();
  s.mutable_num_layers()->add_values(3);
  s.mutable_num_layers()->add_values(4);
  s.mutable_d_ffn()->Clear();
  s.mutable_d_ffn()->add_values(256);
  s.mutable_d_ffn()->add_values(512);
  s.mutable_d_model()->Clear();
  s.mutable_d_model()->add_values(128);
  s.mutable_d_model()->add_values(256);
  return s;
}

// Every architecture of the small space, constraint ignored.
std::vector<Arch> Enumerate(const Space& space) {
  std::vector<Arch> out;
  for (int layers : space.layer_choices()) {
    for (int ffn : space.ffn_choices()) {
      for (int model : space.model_choices()) {
        std::vector<Attention> pattern(layers);
        std::function<void(int)> rec = [&](int i) {
          if (i == layers) {
            auto a = space.Decode(std::vector<double>(space.dimensions(), 0.0));
            a->num_layers = layers;
            a->d_ffn = ffn;
            a->d_model = model;
            a->attention = pattern;
            out.push_back(*a);
            return;
          }
          for (Attention at : space.attention_choices()) {
            pattern[i] = at;
            rec(i + 1);
          }
        };
        rec(0);
      }
    }
  }
  return out;
}

TEST(SpaceTest, DefaultSpaceIsTable3) {
  ASSERT_OK_AND_ASSIGN(Space s, Space::FromProto(DefaultSearchSpace()));
  EXPECT_EQ(s.layer_choices().size(), 7u);  // 10..16
  EXPECT_EQ(s.ffn_choices().size(), 25u);   // 2048..8192 step 256
  EXPECT_EQ(s.model_choices().size(), 9u);  // 1024..2048 step 128
  EXPECT_EQ(s.attention_choices().size(), 3u);
  EXPECT_EQ(s.dimensions(), 3 + 16);
  // Unconstrained: 25 * 9 * sum_{L=10}^{16} 3^L.
  uint64_t patterns = 0;
  for (int l = 10; l <= 16; ++l) patterns += static_cast<uint64_t>(std::pow(3, l));
  EXPECT_EQ(s.Size(/*constrained=*/false), 225 * patterns);
  EXPECT_LT(s.Size(), s.Size(false));
}

TEST(SpaceTest, HugeRangesAreRefusedBeforeTheyAreExpanded) {
  SearchSpace p = DefaultSearchSpace();
  p.mutable_d_ffn()->set_min(1);
  p.mutable_d_ffn()->set_max(2147483647);  // 2^31 choices: 8 GiB and an int overflow
  p.mutable_d_ffn()->set_step(1);
  p.set_block_size(0);
  absl::StatusOr<Space> s = Space::FromProto(p);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()),
              ::testing::HasSubstr("d_ffn: 1..2147483647 step 1"));
  SearchSpace deep = DefaultSearchSpace();
  deep.mutable_num_layers()->set_max(100000);
  deep.mutable_num_layers()->set_min(99999);
  s = Space::FromProto(deep);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()),
              ::testing::HasSubstr("num_layers: choice 99999 exceeds the largest accepted"));
}

TEST(SpaceTest, ConstrainedSizeEqualsBruteForceCount) {
  ASSERT_OK_AND_ASSIGN(Space s, Space::FromProto(SmallProto()));
  uint64_t feasible = 0;
  const auto all = Enumerate(s);
  for (const Arch& a : all) feasible += s.Contains(a).ok();
  EXPECT_EQ(all.size(), s.Size(false));
  EXPECT_EQ(feasible, s.Size());
  EXPECT_LT(feasible, all.size());
}

TEST(SpaceTest, EncodeDecodeRoundTripsEveryMember) {
  ASSERT_OK_AND_ASSIGN(Space s, Space::FromProto(SmallProto()));
  for (const Arch& a : Enumerate(s)) {
    if (!s.Contains(a).ok()) continue;
    ASSERT_OK_AND_ASSIGN(auto x, s.Encode(a));
    ASSERT_EQ(static_cast<int>(x.size()), s.dimensions());
    for (double v : x) ASSERT_TRUE(v > 0 && v < 1);
    ASSERT_OK_AND_ASSIGN(Arch back, s.Decode(x));
    EXPECT_EQ(ArchToProto(back).SerializeAsString(), ArchToProto(a).SerializeAsString())
        << PatternString(a.attention);
  }
}

TEST(SpaceTest, ContainsRejectsThreeConsecutiveEfficientLayers) {
  ASSERT_OK_AND_ASSIGN(Space s, Space::FromProto(SmallProto()));
  ASSERT_OK_AND_ASSIGN(Arch a, s.Decode(std::vector<double>(s.dimensions(), 0.0)));
  a.num_layers = 4;
  a.attention = {Attention::kFull, Attention::kSkip, Attention::kSlidingWindow, Attention::kSkip};
  EXPECT_THAT(s.Contains(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("pattern FSWS has 3 consecutive")));
}

TEST(SpaceTest, ContainsRejectsWidthsThatAreNotChoices) {
  ASSERT_OK_AND_ASSIGN(Space s, Space::FromProto(SmallProto()));
  ASSERT_OK_AND_ASSIGN(Arch a, s.Decode(std::vector<double>(s.dimensions(), 0.0)));
  a.d_ffn = 384;
  a.num_heads = 16;
  EXPECT_THAT(s.Contains(a),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("d_ffn 384 is not a choice"),
                                        HasSubstr("num_heads 16 differs from the space's 32"))));
}

TEST(SpaceTest, DecodeRejectsPointsOutsideTheCube) {
  ASSERT_OK_AND_ASSIGN(Space s, Space::FromProto(SmallProto()));
  std::vector<double> x(s.dimensions(), 0.5);
  x[1] = 1.5;
  EXPECT_THAT(s.Decode(x), StatusIs(absl::StatusCode::kInvalidArgument,
                                    HasSubstr("coordinate d_ffn = 1.5 is outside [0, 1]")));
  EXPECT_THAT(s.Decode({0.5}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("point has 1 coordinates")));
}

TEST(SpaceTest, FromProtoNamesTheBadField) {
  SearchSpace p = SmallProto();
  p.mutable_d_ffn()->add_values(300);
  EXPECT_THAT(Space::FromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("d_ffn: choice 300 is not a multiple of block size 128")));
  p = SmallProto();
  p.mutable_base()->set_num_kv_heads(5);
  EXPECT_THAT(Space::FromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("base: ")));
}

TEST(SpaceTest, AuxiliaryChoicesAddADimension) {
  SearchSpace p = SmallProto();
  p.add_aux_choices()->set_none(true);
  p.add_aux_choices()->set_layer_pruned_ratio(0.5);
  ASSERT_OK_AND_ASSIGN(Space s, Space::FromProto(p));
  EXPECT_EQ(s.dimension_names().back(), "kv_prediction");
  EXPECT_EQ(
      s.Size(), 2 * [&] {
        SearchSpace q = SmallProto();
        return Space::FromProto(q)->Size();
      }());
  std::vector<double> x(s.dimensions(), 0.1);
  x.back() = 0.9;
  ASSERT_OK_AND_ASSIGN(Arch a, s.Decode(x));
  EXPECT_EQ(a.kv_prediction.kind, KvPredictionSpec::Kind::kLayerPruned);
  ASSERT_OK_AND_ASSIGN(auto enc, s.Encode(a));
  EXPECT_DOUBLE_EQ(enc.back(), 0.75);
}

TEST(SpaceTest, KvCacheChoicesAddADimensionFeasibleOnlyForMultiHeadWidths) {
  SearchSpace p = SmallProto();
  p.mutable_base()->set_num_heads(4);
  p.mutable_base()->set_num_kv_heads(4);
  p.mutable_base()->set_head_dim(64);  // 4 x 64 = d_model 256, not 128
  p.add_kv_cache_choices(STANDARD);
  p.add_kv_cache_choices(SLIM);
  ASSERT_OK_AND_ASSIGN(Space s, Space::FromProto(p));
  EXPECT_EQ(s.dimension_names().back(), "kv_cache");
  std::vector<double> x(s.dimensions(), 0.9);  // deepest, widest, ..., SLIM
  ASSERT_OK_AND_ASSIGN(Arch a, s.Decode(x));
  EXPECT_EQ(a.kv_cache, KvLayout::kSlim);
  a.attention.assign(a.num_layers, Attention::kFull);
  EXPECT_OK(s.Contains(a));
  ASSERT_OK_AND_ASSIGN(auto enc, s.Encode(a));
  EXPECT_DOUBLE_EQ(enc.back(), 0.75);
  a.d_model = 128;
  EXPECT_THAT(s.Contains(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("kv_cache SLIM needs multi-head attention")));
  SearchSpace gqa = SmallProto();
  gqa.add_kv_cache_choices(SLIM);
  EXPECT_THAT(Space::FromProto(gqa), StatusIs(absl::StatusCode::kInvalidArgument,
                                              HasSubstr("kv_cache_choices has SLIM but base has")));
}

TEST(SpaceTest, PpdChoicesAddADecodingDimension) {
  SearchSpace p = SmallProto();
  p.add_ppd_choices();  // plain greedy
  PpdChoice* c = p.add_ppd_choices();
  c->set_k(3);
  c->set_layers_from_end(2);
  c->set_timing_match_rate(0.9);
  ASSERT_OK_AND_ASSIGN(Space s, Space::FromProto(p));
  EXPECT_EQ(s.dimension_names().back(), "ppd");
  std::vector<double> x(s.dimensions(), 0.9);
  ASSERT_OK_AND_ASSIGN(Arch a, s.Decode(x));
  EXPECT_EQ(a.num_layers, 4);
  EXPECT_EQ(a.ppd.layer, 2);  // 4 - 2
  EXPECT_EQ(a.ppd.k, 3);
  a.attention.assign(a.num_layers, Attention::kFull);
  EXPECT_OK(s.Contains(a));
  ASSERT_OK_AND_ASSIGN(auto enc, s.Encode(a));
  EXPECT_DOUBLE_EQ(enc.back(), 0.75);
  a.ppd.k = 2;
  EXPECT_THAT(s.Contains(a), StatusIs(absl::StatusCode::kInvalidArgument,
                                      HasSubstr("ppd is not one of the space's ppd_choices")));
  // 3 layers, 2 from the end: layer 1 < 3/2 is outside Theorem 4.1's range.
  x[0] = 0.1;
  ASSERT_OK_AND_ASSIGN(Arch shallow, s.Decode(x));
  shallow.attention.assign(shallow.num_layers, Attention::kFull);
  EXPECT_THAT(s.Contains(shallow),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ppd.layer 1 is outside")));
  p.mutable_ppd_choices(1)->set_layers_from_end(0);
  EXPECT_THAT(Space::FromProto(p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ppd_choices[1]")));
}

}  // namespace
}  // namespace hilnas
