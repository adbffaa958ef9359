#include "search_space/shapes.h"

#include <tuple>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "search_space/counts.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

TEST(ShapesTest, BuiltInRegistryParsesAndValidates) {
  ASSERT_OK_AND_ASSIGN(auto shapes, PublishedShapes());
  EXPECT_GE(shapes.size(), 5u);
}

// DESIGN.md: with tied embeddings and QK-norm weights of size head_dim,
// MobileLLM-Flash-350M has 394,613,632 parameters.
TEST(ShapesTest, MobileLlmFlash350mHasThePublishedCount) {
  ASSERT_OK_AND_ASSIGN(Shape s, FindShape("mobilellm-flash-350m"));
  EXPECT_EQ(CountParameters(s.arch).model(), 394613632);
  EXPECT_EQ(s.arch.num_attention_layers(), 7);
  EXPECT_LE(LongestEfficientRun(s.arch.attention), 2);
}

// Issue 40's families: the counts of the published safetensors.
TEST(ShapesTest, QwenSmolLm3AndGemma3ShapesHaveThePublishedCounts) {
  for (const auto& [name, count, family] :
       {std::tuple{"qwen2.5-0.5b", int64_t{494032768}, "Qwen2ForCausalLM"},
        std::tuple{"qwen2.5-1.5b", int64_t{1543714304}, "Qwen2ForCausalLM"},
        std::tuple{"smollm3-3b", int64_t{3075098624}, "SmolLM3ForCausalLM"},
        std::tuple{"gemma3-270m", int64_t{268098176}, "Gemma3ForCausalLM"},
        std::tuple{"gemma3-1b", int64_t{999885952}, "Gemma3ForCausalLM"},
        // Counted from the model card's dimensions (the files are gated).
        std::tuple{"mobilellm-r1-950m", int64_t{949685760}, "Llama4ForCausalLM"},
        std::tuple{"mobilellm-r1-360m", int64_t{359431168}, "Llama4ForCausalLM"}}) {
    ASSERT_OK_AND_ASSIGN(Shape s, FindShape(name));
    EXPECT_EQ(CountParameters(s.arch).model(), count) << name;
    EXPECT_STREQ(ArchFamily(s.arch), family) << name;
  }
  ASSERT_OK_AND_ASSIGN(Shape smol, FindShape("smollm3-3b"));
  for (int i = 0; i < smol.arch.num_layers; ++i) {
    EXPECT_EQ(smol.arch.rotates(i), (i + 1) % 4 != 0) << "layer " << i;
  }
}

TEST(ShapesTest, FlashShapesMatchTable5) {
  ASSERT_OK_AND_ASSIGN(Shape s650, FindShape("mobilellm-flash-650m"));
  EXPECT_EQ(s650.arch.num_layers, 13);
  EXPECT_EQ(s650.arch.num_attention_layers(), 8);
  EXPECT_LE(LongestEfficientRun(s650.arch.attention), 2);
  ASSERT_OK_AND_ASSIGN(Shape backbone, FindShape("mobilellm-pro-shallow-1.8b"));
  EXPECT_FALSE(backbone.arch.tie_embeddings);
  EXPECT_EQ(backbone.arch.d_ffn, 8192);
}

TEST(ShapesTest, UnknownNameListsKnownOnes) {
  EXPECT_THAT(FindShape("gpt-5"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("mobilellm-flash-350m")));
}

using LayerMapRows = std::vector<std::pair<const char*, std::vector<int>>>;

void ExpectLayerMaps(const LayerMapRows& rows) {
  for (const auto& [name, want] : rows) {
    ASSERT_OK_AND_ASSIGN(Shape s, FindShape(name));
    ASSERT_OK_AND_ASSIGN(auto map, KvPredictionLayerMap(s.arch));
    EXPECT_THAT(map, ElementsAreArray(want)) << name;
  }
}

// KV Prediction Tab. 1b rows, read off the paper.
TEST(ShapesTest, OpenElm3bLayerMapsEqualTable1) {
  const LayerMapRows rows = {
      {"openelm-3b-kvp-c-1.1b",
       {0,  0,  1,  1,  2,  2,  3,  3,  4,  4,  5,  5,  6,  6,  7,  7,  8,  9,
        10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27}},
      {"openelm-3b-kvp-c-450m",
       {0, 0, 1,  1,  2,  2,  3,  3,  4,  4,  5,  5,  6,  6,  7,  7,  8,  8,
        9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15, 16, 17, 18, 19}},
      {"openelm-3b-kvp-c-270m", {0, 0, 0, 1, 1, 1, 2,  2,  2,  3,  3,  3,  4,  4,  5,  5,  6,  6,
                                 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15}},
      {"openelm-3b-kvp-lp-0.75",
       {0,  1,  2,  2,  3,  4,  5,  5,  6,  7,  8,  8,  9,  10, 11, 11, 12, 13,
        14, 14, 15, 16, 17, 17, 18, 19, 20, 20, 21, 22, 23, 23, 24, 25, 26, 26}},
      {"openelm-3b-kvp-lp-0.50",
       {0, 0, 1,  1,  2,  2,  3,  3,  4,  4,  5,  5,  6,  6,  7,  7,  8,  8,
        9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15, 16, 16, 17, 17}},
  };
  ExpectLayerMaps(rows);
}

// KV Prediction Tab. 1a rows.
TEST(ShapesTest, OpenElm11bLayerMapsEqualTable1) {
  const LayerMapRows rows = {
      {"openelm-1.1b-kvp-c-450m", {0, 0, 1, 1, 2,  2,  3,  3,  4,  4,  5,  5,  6,  6,
                                   7, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}},
      {"openelm-1.1b-kvp-c-270m", {0, 0, 1, 1, 2, 2, 3,  3,  4,  4,  5,  5,  6,  6,
                                   7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 13, 14, 15}},
      {"openelm-1.1b-kvp-lp-0.75", {0,  1,  2,  2,  3,  4,  5,  5,  6,  7,  8,  8,  9,  10,
                                    11, 11, 12, 13, 14, 14, 15, 16, 17, 17, 18, 19, 20, 20}},
      {"openelm-1.1b-kvp-lp-0.50", {0, 0, 1, 1, 2, 2, 3,  3,  4,  4,  5,  5,  6,  6,
                                    7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}},
  };
  ExpectLayerMaps(rows);
}

TEST(ShapeRegistryTest, ReportsUndefinedAuxShape) {
  EXPECT_THAT(ParseShapeRegistry(R"pb(shape { name: "x" aux_shape: "nope" })pb", "r.textproto"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("r.textproto: shape \"x\": aux_shape \"nope\" is not defined")));
}

TEST(ShapeRegistryTest, ReportsInvalidArchWithShapeName) {
  EXPECT_THAT(
      ParseShapeRegistry(R"pb(shape {
                                name: "bad"
                                arch {
                                  num_layers: 1
                                  d_model: 64
                                  d_ffn: 64
                                  num_heads: 3
                                  num_kv_heads: 2
                                  head_dim: 8
                                  vocab_size: 10
                                  rope_theta: 1
                                  norm_eps: 1e-5
                                  attention: FULL
                                }
                              })pb",
                         "r.textproto"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("shape \"bad\": arch: num_kv_heads 2 does not divide num_heads 3")));
}

}  // namespace
}  // namespace hilnas
