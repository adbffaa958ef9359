// The committed demo backbone (data/demo-backbone) is what the demo and the
// benchmarks start from: it must load, match its metrics, and model English
// clearly better than chance.
#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "pruner/metrics.h"
#include "quality/trainer.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

const std::string kDir = std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone";

TEST(DemoBackboneTest, LoadsMatchesItsMetricsAndBeatsChanceOnEnglish) {
  ASSERT_OK_AND_ASSIGN(auto reader, CheckpointReader::Open(kDir));
  ASSERT_OK_AND_ASSIGN(Decoder d, reader->Load());
  EXPECT_EQ(d.arch().vocab_size, 256);
  ASSERT_OK_AND_ASSIGN(ActivationMetrics m, LoadMetrics(MetricsFileName(kDir)));
  EXPECT_OK(CheckMetricsMatch(m, "metrics.json", *reader));
  // Text the backbone never saw (not in fortunes or the licences).
  const std::string text =
      "The committee met on Tuesday morning to discuss the budget for the new library. "
      "After a long debate, the members agreed that the children's section should be "
      "expanded, and that the reading room would stay open until nine in the evening. "
      "Several people asked whether the old building could be repaired instead of "
      "replaced, but the engineers said that the foundations were no longer safe.";
  std::vector<int32_t> ids(text.begin(), text.end());
  ASSERT_OK_AND_ASSIGN(double loss, HeldOutLoss(d, ids, 128, 3));
  EXPECT_LT(loss, 0.5 * std::log(256.0)) << "nats/byte; chance is ln 256 = 5.545";
}

}  // namespace
}  // namespace hilnas
