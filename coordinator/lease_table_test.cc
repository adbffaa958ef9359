#include "coordinator/lease_table.h"

#include "coordinator/job_parts_test_util.h"
#include "coordinator/job_queue.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

class LeaseTableTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_OK_AND_ASSIGN(job_, queue_.Submit(Request(), "", "", "")); }
  std::unique_ptr<SqliteDb> db_ = FreshJobDb();
  ManualClock clock_;
  JobQueue queue_{db_.get(), &clock_};
  LeaseTable leases_{db_.get()};
  int64_t job_ = 0;
};

TEST_F(LeaseTableTest, AnActiveLeaseIsRenewedOnlyByItsAgent) {
  const int64_t now = clock_.NowMs();
  ASSERT_OK_AND_ASSIGN(std::string id, leases_.Grant(job_, "agent-1", now, now + 1000));
  ASSERT_OK_AND_ASSIGN(auto held, leases_.ActiveOf("agent-1"));
  ASSERT_TRUE(held.has_value());
  EXPECT_EQ(held->lease_id, id);
  EXPECT_EQ(held->job_id, job_);
  EXPECT_FALSE(leases_.ActiveOf("agent-2").value().has_value());
  EXPECT_TRUE(leases_.Renew("agent-1", id, now + 2000).value());
  EXPECT_FALSE(leases_.Renew("agent-2", id, now + 3000).value());
  // Renewed to now + 2000: not due at now + 1500, due after now + 2000.
  EXPECT_TRUE(leases_.ExpireDue(now + 1500).value().empty());
  ASSERT_OK_AND_ASSIGN(auto expired, leases_.ExpireDue(now + 2001));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].lease_id, id);
  EXPECT_FALSE(leases_.Renew("agent-1", id, now + 4000).value());
  EXPECT_FALSE(leases_.ActiveOf("agent-1").value().has_value());
}

TEST_F(LeaseTableTest, AReportIsTakenOnceAndOnlyOnTheActiveLease) {
  const int64_t now = clock_.NowMs();
  ASSERT_OK_AND_ASSIGN(std::string id, leases_.Grant(job_, "agent-1", now, now + 1000));
  EXPECT_THAT(leases_.StateForReport("lease-nope", "agent-1", job_, now),
              StatusIs(absl::StatusCode::kNotFound, ::testing::_));
  EXPECT_THAT(leases_.StateForReport(id, "agent-2", job_, now),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not agent agent-2's")));
  EXPECT_EQ(leases_.StateForReport(id, "agent-1", job_, now).value(), LeaseState::kActive);
  ASSERT_OK(leases_.MarkReported(id, now));
  EXPECT_EQ(leases_.StateForReport(id, "agent-1", job_, now).value(), LeaseState::kReported);
  EXPECT_EQ(leases_.Reported(job_).value(), 1);
  // A late report on an expired lease is refused with when it expired.
  ASSERT_OK_AND_ASSIGN(std::string late, leases_.Grant(job_, "agent-2", now, now + 10));
  ASSERT_OK(leases_.ExpireDue(now + 11).status());
  EXPECT_THAT(leases_.StateForReport(late, "agent-2", job_, now + 11),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("expired at")));
}

}  // namespace
}  // namespace hilnas
