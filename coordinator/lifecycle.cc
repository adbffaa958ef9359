#include "coordinator/lifecycle.h"

#include <array>
#include <initializer_list>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace hilnas {
namespace {

template <typename E, size_t N>
absl::StatusOr<E> ParseName(absl::string_view text, const std::array<absl::string_view, N>& names,
                            absl::string_view what) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == text) return static_cast<E>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a ", what, " (one of ",
                                                 absl::StrJoin(names, ", "), ")"));
}

constexpr std::array<absl::string_view, 5> kCampaignStates = {"created", "running", "stopped",
                                                             "done", "failed"};
constexpr std::array<absl::string_view, 5> kCampaignEvents = {"start", "stop", "resume", "complete",
                                                             "fail"};

// The campaign transition table: every edge, in one place.
struct CampaignEdge {
  CampaignEvent event;
  std::initializer_list<CampaignState> from;
  CampaignState to;
};
const CampaignEdge kCampaignEdges[] = {
    {CampaignEvent::kStart, {CampaignState::kCreated}, CampaignState::kRunning},
    {CampaignEvent::kStop, {CampaignState::kRunning}, CampaignState::kStopped},
    {CampaignEvent::kResume, {CampaignState::kStopped, CampaignState::kFailed},
     CampaignState::kRunning},
    {CampaignEvent::kComplete, {CampaignState::kRunning}, CampaignState::kDone},
    {CampaignEvent::kFail, {CampaignState::kRunning}, CampaignState::kFailed},
};

constexpr std::array<absl::string_view, 3> kLeaseStates = {"active", "reported", "expired"};

// The lease transition table.
struct LeaseEdge {
  LeaseState from, to;
};
constexpr LeaseEdge kLeaseEdges[] = {
    {LeaseState::kActive, LeaseState::kReported},
    {LeaseState::kActive, LeaseState::kExpired},
};

constexpr std::array<absl::string_view, 3> kAgentStates = {"idle", "busy", "offline"};

}  // namespace

absl::string_view CampaignStateName(CampaignState s) { return kCampaignStates[static_cast<int>(s)]; }
absl::string_view CampaignEventName(CampaignEvent e) { return kCampaignEvents[static_cast<int>(e)]; }

absl::StatusOr<CampaignState> ParseCampaignState(absl::string_view text) {
  return ParseName<CampaignState>(text, kCampaignStates, "campaign state");
}

absl::StatusOr<CampaignState> NextCampaignState(CampaignState from, CampaignEvent event) {
  for (const CampaignEdge& e : kCampaignEdges) {
    if (e.event != event) continue;
    for (CampaignState f : e.from) {
      if (f == from) return e.to;
    }
    std::string allowed;
    for (CampaignState f : e.from) {
      absl::StrAppend(&allowed, allowed.empty() ? "" : " or ", CampaignStateName(f));
    }
    return absl::FailedPreconditionError(absl::StrCat("the campaign is ", CampaignStateName(from),
                                                      "; ", CampaignEventName(event),
                                                      " applies only to a campaign that is ",
                                                      allowed));
  }
  return absl::InternalError(
      absl::StrCat("campaign event ", CampaignEventName(event), " has no transition"));
}

bool CampaignAtRest(CampaignState s) {
  return s == CampaignState::kStopped || s == CampaignState::kDone || s == CampaignState::kFailed;
}

absl::string_view LeaseStateName(LeaseState s) { return kLeaseStates[static_cast<int>(s)]; }

absl::StatusOr<LeaseState> ParseLeaseState(absl::string_view text) {
  return ParseName<LeaseState>(text, kLeaseStates, "lease state");
}

absl::Status CheckLeaseTransition(LeaseState from, LeaseState to) {
  for (const LeaseEdge& e : kLeaseEdges) {
    if (e.from == from && e.to == to) return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat("the lease is ", LeaseStateName(from),
                                                    "; it cannot become ", LeaseStateName(to)));
}

absl::string_view AgentStateName(AgentState s) { return kAgentStates[static_cast<int>(s)]; }

absl::StatusOr<AgentState> ParseAgentState(absl::string_view text) {
  return ParseName<AgentState>(text, kAgentStates, "agent state");
}

AgentState AgentStateOf(bool heartbeat_fresh, bool holds_lease) {
  if (!heartbeat_fresh) return AgentState::kOffline;
  return holds_lease ? AgentState::kBusy : AgentState::kIdle;
}

}  // namespace hilnas
