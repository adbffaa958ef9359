#include "coordinator/agent_registry.h"

#include "coordinator/job_parts_test_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

class AgentRegistryTest : public ::testing::Test {
 protected:
  std::unique_ptr<SqliteDb> db_ = FreshJobDb();
  ManualClock clock_;
  AgentRegistry registry_{db_.get(), &clock_, /*session_ttl_ms=*/1000, /*offline_after_ms=*/5000};
};

TEST_F(AgentRegistryTest, ANameHasOneLiveSessionUntilItsAgentFallsSilent) {
  ASSERT_OK_AND_ASSIGN(AgentSession first, registry_.Register(Device("phone"), ""));
  EXPECT_THAT(registry_.Register(Device("phone"), ""),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("has a live session")));
  // The holder of the session may register again at once, keeping its id.
  ASSERT_OK_AND_ASSIGN(AgentSession again, registry_.Register(Device("phone"), first.session_key));
  EXPECT_EQ(again.agent_id, first.agent_id);
  EXPECT_NE(again.session_key, first.session_key);
  clock_.AdvanceMs(1001);
  ASSERT_OK_AND_ASSIGN(AgentSession taken, registry_.Register(Device("phone"), ""));
  EXPECT_EQ(taken.agent_id, first.agent_id);
  EXPECT_THAT(registry_.Register(Device(""), ""),
              StatusIs(absl::StatusCode::kInvalidArgument, ::testing::_));
}

TEST_F(AgentRegistryTest, OnlyTheCurrentSessionKeyIsAccepted) {
  ASSERT_OK_AND_ASSIGN(AgentSession first, registry_.Register(Device("phone"), ""));
  EXPECT_OK(registry_.CheckSession(first.agent_id, first.session_key));
  ASSERT_OK_AND_ASSIGN(AgentSession second, registry_.Register(Device("phone"), first.session_key));
  EXPECT_THAT(registry_.CheckSession(first.agent_id, first.session_key),
              StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_));
  EXPECT_OK(registry_.CheckSession(second.agent_id, second.session_key));
  EXPECT_THAT(registry_.CheckSession("agent-unknown", second.session_key),
              StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_));
  EXPECT_THAT(registry_.CheckSession(second.agent_id, ""),
              StatusIs(absl::StatusCode::kUnauthenticated, ::testing::_));
}

TEST_F(AgentRegistryTest, StateFollowsTheClockAndJobsAreCounted) {
  ASSERT_OK_AND_ASSIGN(AgentSession s, registry_.Register(Device("phone"), ""));
  ASSERT_OK(registry_.CountJob(s.agent_id, true));
  ASSERT_OK(registry_.CountJob(s.agent_id, false));
  ASSERT_OK_AND_ASSIGN(AgentRecord a, registry_.Get(s.agent_id));
  EXPECT_EQ(a.state, AgentState::kIdle);
  EXPECT_EQ(a.jobs_done, 1);
  EXPECT_EQ(a.jobs_failed, 1);
  EXPECT_EQ(a.canaries, 0);
  clock_.AdvanceMs(5001);
  ASSERT_OK_AND_ASSIGN(a, registry_.Get(s.agent_id));
  EXPECT_EQ(a.state, AgentState::kOffline);
  ASSERT_OK(registry_.Touch(s.agent_id, clock_.NowMs()));
  ASSERT_OK_AND_ASSIGN(a, registry_.Get(s.agent_id));
  EXPECT_EQ(a.state, AgentState::kIdle);
  EXPECT_THAT(registry_.Touch("agent-unknown", clock_.NowMs()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("register first")));
  EXPECT_OK(registry_.TouchAll({"agent-unknown", s.agent_id}, clock_.NowMs()));
  ASSERT_OK_AND_ASSIGN(std::vector<AgentRecord> all, registry_.List());
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].device.name(), "phone");
}

}  // namespace
}  // namespace hilnas
