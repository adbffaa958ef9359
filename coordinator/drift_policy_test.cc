#include "coordinator/drift_policy.h"

#include "coordinator/job_parts_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

CanaryReading Reading(double ttft, double decode, int64_t at_ms) {
  CanaryReading c;
  *c.mutable_request() = Request(1024);
  c.set_ttft_ms(ttft);
  c.set_decode_ms_per_token(decode);
  c.set_measured_unix_ms(at_ms);
  return c;
}

TEST(DriftPolicyTest, TheBaselineIsTheFastestUntilTenReadingsThenTheTenthPercentile) {
  const DriftPolicy policy{0.10, 2};
  CanaryReading r = Reading(120, 2.0, 1);
  JudgeCanary(policy, CanaryHistory{{100, 130}, {2.0, 2.5}}, r);
  EXPECT_DOUBLE_EQ(r.baseline_ttft_ms(), 100);
  EXPECT_DOUBLE_EQ(r.ttft_ratio(), 1.2);
  EXPECT_DOUBLE_EQ(r.decode_ratio(), 1.0);
  EXPECT_TRUE(r.drifted());
  // Twelve readings: the 10th percentile is the second fastest, so one
  // lucky 50 ms reading does not set the baseline.
  CanaryHistory h;
  for (int i = 0; i < 10; ++i) h.ttft_ms.push_back(100 + i);
  h.ttft_ms.push_back(50);
  CanaryReading s = Reading(105, 0, 2);
  JudgeCanary(policy, h, s);
  EXPECT_DOUBLE_EQ(s.baseline_ttft_ms(), 100);
  EXPECT_FALSE(s.drifted());
  EXPECT_DOUBLE_EQ(s.decode_ratio(), 1.0);  // no decode timed: no decode drift
}

TEST(DriftPolicyTest, DecodeAloneCanDriftAndRequeuesAreBounded) {
  const DriftPolicy policy{0.10, 2};
  CanaryReading r = Reading(100, 3.0, 1);
  JudgeCanary(policy, CanaryHistory{{100}, {2.0}}, r);
  EXPECT_DOUBLE_EQ(r.ttft_ratio(), 1.0);
  EXPECT_DOUBLE_EQ(r.decode_ratio(), 1.5);
  EXPECT_TRUE(r.drifted());
  EXPECT_TRUE(RequeueForDrift(policy, r, 0));
  EXPECT_TRUE(RequeueForDrift(policy, r, 1));
  EXPECT_FALSE(RequeueForDrift(policy, r, 2));
  EXPECT_THAT(DriftRequeueMessage(policy, r, 1), HasSubstr("1.50x decode"));
  EXPECT_THAT(DriftRequeueMessage(policy, r, 1), HasSubstr("(2 of 2)"));
}

TEST(DriftPolicyTest, AReadingThatIsNotAMeasurementIsRefused) {
  EXPECT_OK(CheckCanaryReading("a", Reading(100, 2, 1)));
  EXPECT_THAT(CheckCanaryReading("a", Reading(0, 2, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a measurement")));
  EXPECT_THAT(CheckCanaryReading("a", Reading(NAN, 2, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(CheckCanaryReading("a", Reading(100, -1, 1)),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
  EXPECT_THAT(CheckCanaryReading("a", Reading(100, 2, 0)),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST(CanaryLogTest, HistoryIsTheAgentsOwnReadingsOfTheSameCanary) {
  std::unique_ptr<SqliteDb> db = FreshJobDb();
  CanaryLog log(db.get());
  ASSERT_OK(log.Record("a", Reading(100, 2, 1)));
  ASSERT_OK(log.Record("a", Reading(999, 2, 1)));  // same time: ignored
  ASSERT_OK(log.Record("a", Reading(110, 2, 2)));
  ASSERT_OK(log.Record("b", Reading(50, 1, 3)));
  CanaryReading other = Reading(70, 1, 4);
  other.mutable_request()->set_prompt_lengths(0, 64);
  ASSERT_OK(log.Record("a", other));
  ASSERT_OK_AND_ASSIGN(CanaryHistory h, log.History("a", Reading(120, 2, 2)));
  EXPECT_THAT(h.ttft_ms, ::testing::ElementsAre(100));  // not itself, not b's, not the other canary
  ASSERT_OK_AND_ASSIGN(auto newest, log.Newest("a"));
  EXPECT_EQ(newest.first, 3);
  ASSERT_TRUE(newest.second.has_value());
  EXPECT_EQ(newest.second->measured_unix_ms(), 4);
}

}  // namespace
}  // namespace hilnas
