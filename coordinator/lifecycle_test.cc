#include "coordinator/lifecycle.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

TEST(LifecycleTest, CampaignTableHasExactlyTheDocumentedEdges) {
  const CampaignState all[] = {CampaignState::kCreated, CampaignState::kRunning,
                               CampaignState::kStopped, CampaignState::kDone,
                               CampaignState::kFailed};
  const CampaignEvent events[] = {CampaignEvent::kStart, CampaignEvent::kStop,
                                  CampaignEvent::kResume, CampaignEvent::kComplete,
                                  CampaignEvent::kFail};
  int edges = 0;
  for (CampaignState from : all) {
    for (CampaignEvent e : events) edges += NextCampaignState(from, e).ok();
  }
  EXPECT_EQ(edges, 6);
  EXPECT_EQ(*NextCampaignState(CampaignState::kCreated, CampaignEvent::kStart),
            CampaignState::kRunning);
  EXPECT_EQ(*NextCampaignState(CampaignState::kRunning, CampaignEvent::kStop),
            CampaignState::kStopped);
  EXPECT_EQ(*NextCampaignState(CampaignState::kStopped, CampaignEvent::kResume),
            CampaignState::kRunning);
  EXPECT_EQ(*NextCampaignState(CampaignState::kFailed, CampaignEvent::kResume),
            CampaignState::kRunning);
  EXPECT_EQ(*NextCampaignState(CampaignState::kRunning, CampaignEvent::kComplete),
            CampaignState::kDone);
  EXPECT_EQ(*NextCampaignState(CampaignState::kRunning, CampaignEvent::kFail),
            CampaignState::kFailed);
}

TEST(LifecycleTest, MissingEdgeNamesStateEventAndAllowedStates) {
  EXPECT_THAT(NextCampaignState(CampaignState::kDone, CampaignEvent::kResume),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("is done; resume applies only to a campaign that is stopped or "
                                 "failed")));
}

TEST(LifecycleTest, NamesRoundTripAndUnknownTextIsRefused) {
  for (CampaignState s : {CampaignState::kCreated, CampaignState::kRunning, CampaignState::kStopped,
                          CampaignState::kDone, CampaignState::kFailed}) {
    EXPECT_EQ(*ParseCampaignState(CampaignStateName(s)), s);
  }
  for (LeaseState s : {LeaseState::kActive, LeaseState::kReported, LeaseState::kExpired}) {
    EXPECT_EQ(*ParseLeaseState(LeaseStateName(s)), s);
  }
  for (AgentState s : {AgentState::kIdle, AgentState::kBusy, AgentState::kOffline}) {
    EXPECT_EQ(*ParseAgentState(AgentStateName(s)), s);
  }
  EXPECT_THAT(ParseCampaignState("runing"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("\"runing\" is not a campaign state (one of created, running")));
  EXPECT_THAT(ParseLeaseState(""), StatusIs(absl::StatusCode::kInvalidArgument,
                                            HasSubstr("is not a lease state")));
}

TEST(LifecycleTest, LeasesEndOnceAndNeverComeBack) {
  EXPECT_TRUE(CheckLeaseTransition(LeaseState::kActive, LeaseState::kReported).ok());
  EXPECT_TRUE(CheckLeaseTransition(LeaseState::kActive, LeaseState::kExpired).ok());
  EXPECT_THAT(CheckLeaseTransition(LeaseState::kExpired, LeaseState::kReported),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("the lease is expired; it cannot become reported")));
  EXPECT_FALSE(CheckLeaseTransition(LeaseState::kReported, LeaseState::kActive).ok());
}

TEST(LifecycleTest, AgentIsOfflineBeforeBusy) {
  EXPECT_EQ(AgentStateOf(false, true), AgentState::kOffline);
  EXPECT_EQ(AgentStateOf(true, true), AgentState::kBusy);
  EXPECT_EQ(AgentStateOf(true, false), AgentState::kIdle);
}

}  // namespace
}  // namespace hilnas
