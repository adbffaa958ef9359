#include "device_agent/window_pricing.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_archs.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

WindowPricingOptions Small() {
  WindowPricingOptions o;
  o.prompt_tokens = 48;
  o.decode_tokens = 3;
  o.rounds = 2;
  return o;
}

// The mechanism, not the figures (bench/window_pricing.sh and the agents
// measure those): each variant's layers run the kernels their kind names,
// and every ratio comes from both of the timings it divides.
TEST(WindowPricingTest, EachVariantRunsItsOwnKernelsAndTheRatiosComeFromThem) {
  std::vector<std::string> progress;
  WindowPricingOptions o = Small();
  o.progress = [&](const std::string& line) { progress.push_back(line); };
  ASSERT_OK_AND_ASSIGN(WindowPricing p, PriceWindowLayers(TinyMixedArch(), o));
  ASSERT_EQ(p.rows.size(), 4u);
  EXPECT_EQ(p.rows[0].variant, "all-full");
  EXPECT_EQ(p.rows[0].pattern, "F F F F");
  EXPECT_EQ(p.rows[1].pattern, "F W W F");
  EXPECT_EQ(p.rows[2].pattern, "W W W W");
  EXPECT_EQ(p.rows[3].pattern, "K K K K");
  for (int i = 0; i < 3; ++i) {
    EXPECT_GT(p.rows[i].attention_prefill_ms, 0) << p.rows[i].variant;
    EXPECT_GT(p.rows[i].attention_decode_ms, 0) << p.rows[i].variant;
  }
  EXPECT_EQ(p.rows[3].attention_prefill_ms, 0);  // no attention layer, no kernel time
  EXPECT_EQ(p.rows[3].attention_decode_ms, 0);
  for (const WindowPricingRow& r : p.rows) {  // every variant multiplies its weights
    EXPECT_GT(r.products_prefill_ms, 0) << r.variant;
    EXPECT_GT(r.products_decode_ms, 0) << r.variant;
  }
  for (const PricingRatio& r :
       {p.attention_prefill, p.attention_decode, p.fastest_prefill, p.fastest_decode,
        p.normalised_prefill, p.normalised_decode, p.mixed_prefill, p.mixed_decode}) {
    EXPECT_EQ(r.rounds, 2);
    EXPECT_GT(r.median, 0);
    EXPECT_LE(r.low, r.median);
    EXPECT_GE(r.high, r.median);
  }
  // The kernels' tunings (decode form, thread pool and split, the prompt's
  // products) and one line a round.
  ASSERT_EQ(progress.size(), 6u);
  EXPECT_THAT(progress[0], HasSubstr("decode GEMV form"));
  EXPECT_THAT(progress[1], HasSubstr("decode thread pool: "));
  EXPECT_THAT(progress[2], HasSubstr("decode attention"));
  EXPECT_THAT(progress[3], HasSubstr("prompt products: "));
  EXPECT_THAT(progress[5], HasSubstr("round 2/2: all-full"));
  const std::string table = WindowPricingTable(p);
  EXPECT_THAT(table, HasSubstr("| mixed | F W W F |"));
  EXPECT_THAT(table, HasSubstr("| attention kernels in the model (all-window / all-full) |"));
  EXPECT_THAT(table, HasSubstr("| the same, each model's attention over its own weight products' "
                               "time | "));
}

// A round whose all-full and all-skip generations met different host
// states (F - K far under its usual size, or below zero) is left out of
// the whole layer's share instead of reading 5408 or -0.2; the table says
// how many rounds were kept.
TEST(WindowPricingTest, AWholeLayersShareLeavesOutRoundsWithoutALayersDifference) {
  //                 round:  1      2      3      4      5
  const std::vector<double> w = {140.0, 139.0, 150.0, 141.0, 120.0};
  const std::vector<double> k = {100.0, 100.0, 149.9, 101.0, 130.0};
  const std::vector<double> f = {200.0, 198.0, 150.0, 199.0, 125.0};
  const std::vector<double> r = WholeLayerRatios(w, k, f);
  ASSERT_EQ(r.size(), 3u);  // round 3's F - K is 0.1, round 5's -5
  EXPECT_DOUBLE_EQ(r[0], 0.4);
  EXPECT_DOUBLE_EQ(r[1], 39.0 / 98.0);
  EXPECT_DOUBLE_EQ(r[2], 40.0 / 98.0);
  EXPECT_EQ(WholeLayerRatios({1.5}, {1.0}, {2.0}), std::vector<double>{0.5});
  EXPECT_TRUE(WholeLayerRatios({}, {}, {}).empty());

  WindowPricing p;
  p.layer_prefill = {0.4, 0.398, 0.408, 3, 5};
  p.layer_decode = {0.4, 0.39, 0.41, 5, 5};
  const std::string table = WindowPricingTable(p);
  EXPECT_THAT(table, HasSubstr("| 0.400 (0.398-0.408), 3 of 5 rounds | 0.400 (0.390-0.410) |"));
}

// Each side's fastest round, whichever rounds those are: a round where the
// host took a thread away from the short all-window generation raises the
// median of the per-round ratios but not this one. Rounds without a
// timing (0) are left out, and say so.
TEST(WindowPricingTest, TheFastestRoundsRatioTakesEachSidesOwnFastestRound) {
  //                            round:  1     2     3
  const PricingRatio r = FastestRoundsRatio({4.2, 3.9, 6.0}, {28.0, 29.0, 27.5});
  EXPECT_DOUBLE_EQ(r.median, 3.9 / 27.5);
  EXPECT_DOUBLE_EQ(r.low, r.median);
  EXPECT_DOUBLE_EQ(r.high, r.median);
  EXPECT_EQ(r.rounds, 3);
  const PricingRatio some = FastestRoundsRatio({0.0, 3.0}, {20.0, 30.0});
  EXPECT_DOUBLE_EQ(some.median, 0.15);
  EXPECT_EQ(some.rounds, 1);
  EXPECT_EQ(FastestRoundsRatio({0.0}, {30.0}).rounds, 0);
  EXPECT_EQ(FastestRoundsRatio({}, {}).rounds, 0);

  WindowPricing p;
  p.fastest_prefill = {0.1234, 0.1234, 0.1234, 3, 3};
  p.fastest_decode = {0.1, 0.1, 0.1, 1, 3};
  EXPECT_THAT(WindowPricingTable(p),
              HasSubstr("| the same from each variant's fastest round (min all-window / min "
                        "all-full) | 0.123 | 0.100, 1 of 3 rounds |"));
}

TEST(WindowPricingTest, ShapesWithoutAWindowToPriceAreRefusedByName) {
  Arch no_window = TinyMixedArch();
  no_window.sliding_window = 0;
  no_window.attention.assign(4, Attention::kFull);
  EXPECT_THAT(PriceWindowLayers(no_window, Small()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sliding_window is 0")));
  WindowPricingOptions short_prompt = Small();
  short_prompt.prompt_tokens = 3;
  EXPECT_THAT(PriceWindowLayers(TinyMixedArch(), short_prompt),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("a prompt of 3 tokens fits the window of 3")));
  Arch two = TinyMixedArch();
  two.num_layers = 2;
  two.attention.resize(2);
  EXPECT_THAT(PriceWindowLayers(two, Small()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs 3 or more")));
  WindowPricingOptions bad_dtype = Small();
  bad_dtype.kv_dtype = "q3";
  EXPECT_THAT(PriceWindowLayers(TinyMixedArch(), bad_dtype),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("q3")));
  WindowPricingOptions tight = Small();
  tight.memory_limit_bytes = 1024;
  EXPECT_THAT(PriceWindowLayers(TinyMixedArch(), tight),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("four models")));
}

}  // namespace
}  // namespace hilnas
