// The coordinator's state machines as enums, each with one transition table
// in lifecycle.cc (STYLE 18): campaigns, benchmark leases, and the state an
// agent is shown in. SQLite and the wire keep the text form ("running",
// "active", "idle"); Parse* checks it on the way back, so a typo in a state
// is a compile error and a corrupt row is a clear one.
#ifndef HILNAS_COORDINATOR_LIFECYCLE_H_
#define HILNAS_COORDINATOR_LIFECYCLE_H_

#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace hilnas {

// A campaign's lifecycle:
//   created --start--> running --stop--> stopped --resume--> running
//   running --complete--> done;  running --fail--> failed --resume--> running
enum class CampaignState { kCreated, kRunning, kStopped, kDone, kFailed };
enum class CampaignEvent { kStart, kStop, kResume, kComplete, kFail };

absl::string_view CampaignStateName(CampaignState state);  // "created", "running", ...
absl::string_view CampaignEventName(CampaignEvent event);  // "start", "stop", ...
// INVALID_ARGUMENT naming the text for anything but the five names.
absl::StatusOr<CampaignState> ParseCampaignState(absl::string_view text);
// The state `event` leads to from `from`; FAILED_PRECONDITION naming both
// (and the states the event is allowed from) when the table has no such edge.
absl::StatusOr<CampaignState> NextCampaignState(CampaignState from, CampaignEvent event);
// Whether a campaign in `state` will not move again without a user
// (stopped, done, failed).
bool CampaignAtRest(CampaignState state);

// A benchmark lease: active until its report is accepted (reported) or its
// deadline passes unrenewed (expired). Both ends are final.
enum class LeaseState { kActive, kReported, kExpired };
absl::string_view LeaseStateName(LeaseState state);  // "active", "reported", "expired"
absl::StatusOr<LeaseState> ParseLeaseState(absl::string_view text);
// FAILED_PRECONDITION unless `from` -> `to` is an edge of the lease table.
absl::Status CheckLeaseTransition(LeaseState from, LeaseState to);

// How an agent is shown: derived on every read, never stored. Offline when
// its last heartbeat is older than JobStoreOptions::offline_after_ms, else
// busy while it holds an active lease, else idle.
enum class AgentState { kIdle, kBusy, kOffline };
absl::string_view AgentStateName(AgentState state);  // "idle", "busy", "offline"
absl::StatusOr<AgentState> ParseAgentState(absl::string_view text);
AgentState AgentStateOf(bool heartbeat_fresh, bool holds_lease);

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_LIFECYCLE_H_
