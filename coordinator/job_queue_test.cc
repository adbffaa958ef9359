#include "coordinator/job_queue.h"

#include "coordinator/job_parts_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

class JobQueueTest : public ::testing::Test {
 protected:
  std::unique_ptr<SqliteDb> db_ = FreshJobDb();
  ManualClock clock_;
  JobQueue queue_{db_.get(), &clock_};
};

TEST_F(JobQueueTest, SubmissionUnderAClientKeyIsIdempotentAndBadRequestsAreRefused) {
  ASSERT_OK_AND_ASSIGN(int64_t a, queue_.Submit(Request(), "", "", "campaign-x/trial-1"));
  ASSERT_OK_AND_ASSIGN(int64_t b, queue_.Submit(Request(), "", "", "campaign-x/trial-1"));
  EXPECT_EQ(a, b);
  ASSERT_OK_AND_ASSIGN(int64_t c, queue_.Submit(Request(), "", "", ""));
  EXPECT_NE(c, a);
  EXPECT_EQ(queue_.Unfinished().value_or(-1), 2);
  BenchmarkRequest none;  // neither arch nor checkpoint
  EXPECT_THAT(queue_.Submit(none, "", "", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST_F(JobQueueTest, NextForHonoursDeviceAndPoolOldestFirst) {
  ASSERT_OK_AND_ASSIGN(int64_t pinned, queue_.Submit(Request(), "pixel", "", ""));
  ASSERT_OK_AND_ASSIGN(int64_t pooled, queue_.Submit(Request(), "", "arm", ""));
  ASSERT_OK_AND_ASSIGN(int64_t any, queue_.Submit(Request(512), "", "", ""));
  ASSERT_OK_AND_ASSIGN(auto next, queue_.NextFor(Device("laptop")));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->job_id, any);
  EXPECT_EQ(next->request.prompt_lengths(0), 512);
  ASSERT_OK_AND_ASSIGN(next, queue_.NextFor(Device("phone", "arm")));
  EXPECT_EQ(next->job_id, pooled);
  ASSERT_OK_AND_ASSIGN(next, queue_.NextFor(Device("pixel")));
  EXPECT_EQ(next->job_id, pinned);
  ASSERT_OK(queue_.MarkLeased(pinned, "agent-1"));
  ASSERT_OK_AND_ASSIGN(next, queue_.NextFor(Device("pixel")));
  EXPECT_EQ(next->job_id, any);
}

TEST_F(JobQueueTest, StatesMoveAsLeasesExpireDriftAndResultsArrive) {
  ASSERT_OK_AND_ASSIGN(int64_t id, queue_.Submit(Request(), "", "", ""));
  ASSERT_OK(queue_.MarkLeased(id, "agent-1"));
  ASSERT_OK_AND_ASSIGN(JobRecord j, queue_.Get(id));
  EXPECT_EQ(j.state, LEASED);
  EXPECT_EQ(j.attempts, 1);
  ASSERT_OK(queue_.ReturnExpired(id, false, "back in the queue", clock_.NowMs()));
  ASSERT_OK_AND_ASSIGN(j, queue_.Get(id));
  EXPECT_EQ(j.state, STALE);
  EXPECT_TRUE(queue_.HasLeasable().value_or(false));
  ASSERT_OK(queue_.MarkLeased(id, "agent-2"));
  ASSERT_OK(queue_.RequeueForDrift(id, "canary at 1.30x"));
  ASSERT_OK_AND_ASSIGN(j, queue_.Get(id));
  EXPECT_EQ(j.state, QUEUED);
  EXPECT_EQ(j.drift_requeues, 1);
  EXPECT_EQ(j.attempts, 2);
  // The drift re-queue does not count towards giving up.
  EXPECT_EQ(queue_.AttemptsCounted(id).value_or(-1), 1);
  BenchmarkResult r;
  r.add_samples()->set_ttft_ms(12);
  ASSERT_OK(queue_.Finish(id, true, r, "", clock_.NowMs()));
  ASSERT_OK_AND_ASSIGN(j, queue_.Get(id));
  EXPECT_TRUE(JobFinished(j.state));
  ASSERT_TRUE(j.result.has_value());
  EXPECT_EQ(j.result->samples(0).ttft_ms(), 12);
  EXPECT_FALSE(queue_.HasLeasable().value_or(true));
  EXPECT_THAT(queue_.Get(id + 1), StatusIs(absl::StatusCode::kNotFound, HasSubstr("unknown job")));
  EXPECT_THAT(queue_.AttemptsCounted(id + 1),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("unknown job")));
}

}  // namespace
}  // namespace hilnas
