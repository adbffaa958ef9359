#include "model/ppd.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/slim.h"
#include "model/test_archs.h"
#include "search_space/counts.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

const std::string kBackbone = std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone";

// Bytes of English the demo backbone never saw.
std::vector<int64_t> EnglishPrompt() {
  const std::string text =
      "The committee met on Tuesday morning to discuss the budget for the new library. "
      "After a long debate, the members agreed that the ";
  return std::vector<int64_t>(text.begin(), text.end());
}

TEST(PredictPpdTest, TheoremFourOne) {
  // d = 8, d_bar = 4, k = 1, l = 10, p = 0.5: 80 - 4 * 9 * 0.5 = 62 layer
  // passes of latency; compute adds k (d - d_bar) l = 40.
  PpdPrediction p = PredictPpd(8, 4, 1, 10, 0.5);
  EXPECT_DOUBLE_EQ(p.latency_layers, 62);
  EXPECT_DOUBLE_EQ(p.compute_layers, 102);
  EXPECT_DOUBLE_EQ(p.latency_ratio, 62.0 / 80);
  // Eq. 3 and 5 (l >> 1, d_bar = d/2): latency -> d (1 - p/2); compute per
  // time unit -> (k + 2 - p) / (2 - p).
  PpdPrediction big = PredictPpd(40, 20, 3, 1'000'000, 0.6);
  EXPECT_NEAR(big.latency_ratio, 1 - 0.6 / 2, 1e-6);
  EXPECT_NEAR(big.compute_layers / big.latency_layers, (3 + 2 - 0.6) / (2 - 0.6), 1e-5);
  EXPECT_DOUBLE_EQ(PredictPpd(8, 6, 2, 5, 0).latency_ratio, 1);
}

TEST(PpdGenerateTest, IdenticalToGreedyOver256TokensOnTheDemoBackbone) {
  UseOneThreadPerUnit();  // k + 1 units on 2 cores stay cheap
  ASSERT_OK_AND_ASSIGN(Decoder d, LoadCheckpoint(kBackbone));
  GenerateOptions o;
  o.max_new_tokens = 256;
  o.prefill_chunk = 64;
  ASSERT_OK_AND_ASSIGN(Generation greedy, GreedyGenerate(d, EnglishPrompt(), o));
  const int layers = d.arch().num_layers;
  for (auto [d_bar, k] : std::vector<std::pair<int, int>>{{4, 1}, {5, 3}, {6, 2}, {7, 1}}) {
    PpdOptions p;
    p.layer = d_bar;
    p.k = k;
    p.generate = o;
    ASSERT_OK_AND_ASSIGN(PpdGeneration g, PpdGenerate(d, EnglishPrompt(), p));
    EXPECT_EQ(g.tokens, greedy.tokens) << "d_bar " << d_bar << " k " << k;
    Arch with_ppd = d.arch();
    with_ppd.ppd = {d_bar, k};
    EXPECT_EQ(g.stats.kv_cache_bytes, KvCacheBytes(with_ppd, greedy.stats.prompt_tokens + 256, 4));
    const PpdCounts& c = g.counts;
    EXPECT_EQ(c.decode_steps, 255);
    EXPECT_EQ(c.predictions, 254);
    // Each match saves exactly the d - d_bar layers a sub ran (Theorem 4.1).
    EXPECT_EQ(c.main_layers, layers * c.decode_steps - (layers - d_bar) * c.matches);
    EXPECT_LE(c.sub_layers, int64_t{k} * (layers - d_bar) * c.predictions);
    EXPECT_GE(c.sub_layers, (layers - d_bar) * c.matches);
    if (d_bar >= 6) {
      EXPECT_GT(c.p_correct(), 0.5) << "d_bar " << d_bar << " k " << k;
    }
  }
}

TEST(PpdGenerateTest, WorksOnSlimCachesAndOddLayerCounts) {
  Arch a = TinyMhaArch();
  a.num_layers = 5;
  a.attention = {Attention::kFull, Attention::kSlidingWindow, Attention::kSkip, Attention::kFull,
                 Attention::kSlidingWindow};
  ASSERT_OK_AND_ASSIGN(Decoder standard, Decoder::Create(a, 3, torch::kDouble));
  ASSERT_OK_AND_ASSIGN(Decoder slim, ConvertToSlim(standard, SlimOptions{}));
  GenerateOptions o;
  o.max_new_tokens = 40;
  o.prefill_chunk = 4;
  const std::vector<int64_t> prompt = {1, 5, 9, 2, 7, 7, 3};
  for (Decoder* d : {&standard, &slim}) {
    ASSERT_OK_AND_ASSIGN(Generation greedy, GreedyGenerate(*d, prompt, o));
    for (int k : {1, 4}) {
      PpdOptions p;
      p.layer = 3;
      p.k = k;
      p.generate = o;
      ASSERT_OK_AND_ASSIGN(PpdGeneration g, PpdGenerate(*d, prompt, p));
      EXPECT_EQ(g.tokens, greedy.tokens);
    }
  }
}

TEST(PpdGenerateTest, RejectsLayersOutsideTheTheoremsRange) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 1, torch::kFloat));
  PpdOptions p;
  p.layer = 1;
  EXPECT_THAT(PpdGenerate(d, {1, 2}, p), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("--layer 1 is outside [2, 3]")));
  p.layer = 4;
  EXPECT_THAT(PpdGenerate(d, {1, 2}, p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside [2, 3]")));
  p.layer = 2;
  p.k = 0;
  EXPECT_THAT(PpdGenerate(d, {1, 2}, p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--k 0 must be in 1..50")));
  p.k = 1;
  EXPECT_THAT(PpdGenerate(d, {1, 99}, p),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside vocabulary")));
}

// Agents time random-weight models at a trained model's match rate.
TEST(PpdGenerateTest, ForcedMatchRateDrivesTheMatchesForTiming) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 1, torch::kFloat));
  PpdOptions p;
  p.layer = 2;
  p.k = 2;
  p.generate.max_new_tokens = 101;
  for (double rate : {0.0, 1.0, 0.5}) {
    p.forced_match_rate = rate;
    ASSERT_OK_AND_ASSIGN(PpdGeneration g, PpdGenerate(d, {1, 2, 3}, p));
    const PpdCounts& c = g.counts;
    EXPECT_EQ(c.predictions, 99);
    EXPECT_EQ(g.tokens.size(), 101u);
    EXPECT_EQ(c.main_layers, 4 * c.decode_steps - 2 * c.matches);
    if (rate == 0) {
      EXPECT_EQ(c.matches, 0);
    }
    if (rate == 1) {
      EXPECT_EQ(c.matches, 99);
    }
    if (rate == 0.5) {
      EXPECT_GT(c.matches, 30);
      EXPECT_LT(c.matches, 70);
    }
  }
}

TEST(MeasureMatchRatesTest, GrowWithLayerAndK) {
  ASSERT_OK_AND_ASSIGN(Decoder d, LoadCheckpoint(kBackbone));
  ASSERT_OK_AND_ASSIGN(MatchRates r,
                       MeasureMatchRates(d, {EnglishPrompt()}, 64, {2, 4, 6, 8}, {1, 3, 5}));
  EXPECT_EQ(r.positions, 64);
  for (size_t li = 0; li < r.layers.size(); ++li) {
    for (size_t ki = 1; ki < r.ks.size(); ++ki) EXPECT_GE(r.rate(li, ki), r.rate(li, ki - 1));
  }
  EXPECT_DOUBLE_EQ(r.rate(3, 0), 1.0);  // the last layer is the final prediction
  EXPECT_GT(r.rate(2, 0), r.rate(0, 0));
  EXPECT_THAT(r.ToMarkdown(), HasSubstr("| k | layer 2 | layer 4 | layer 6 | layer 8 |"));
  EXPECT_THAT(MeasureMatchRates(d, {EnglishPrompt()}, 4, {9}, {1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layer 9 is outside 1..8")));
}

}  // namespace
}  // namespace hilnas
