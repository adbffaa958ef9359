// Registered agents (the `agents` table, job_schema.h): one live session per
// device name, the session key checked on every call (only its SHA-256 is
// stored), liveness from the last heartbeat, and what each agent has done.
// `db` and `clock` are not owned; callers serialise access and hold the
// transaction (JobStore does both).
#ifndef HILNAS_COORDINATOR_AGENT_REGISTRY_H_
#define HILNAS_COORDINATOR_AGENT_REGISTRY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/drift_policy.h"
#include "coordinator/lifecycle.h"
#include "coordinator/sqlite.h"
#include "proto/benchmark.pb.h"
#include "util/clock.h"

namespace hilnas {

struct AgentRecord {
  std::string agent_id;
  DeviceIdentity device;
  int64_t registered_ms = 0;
  int64_t last_heartbeat_ms = 0;
  int64_t jobs_done = 0;
  int64_t jobs_failed = 0;
  AgentState state = AgentState::kIdle;      // derived on each read (lifecycle.h)
  int canaries = 0;                          // drift-check readings on record
  std::optional<CanaryReading> last_canary;  // the newest, with its ratios
};

// What Register hands an agent: its id (not a secret: lists show it) and
// the session key every later call must carry (a secret: stored only as
// a SHA-256 digest, never returned again).
struct AgentSession {
  std::string agent_id;
  std::string session_key;
};

class AgentRegistry {
 public:
  // `session_ttl_ms`: a name's session is live while its agent was heard
  // from within this long (the lease lifetime); `offline_after_ms`: no
  // heartbeat for this long reads AgentState::kOffline.
  AgentRegistry(SqliteDb* db, const Clock* clock, int64_t session_ttl_ms, int64_t offline_after_ms)
      : db_(db),
        clock_(clock),
        session_ttl_ms_(session_ttl_ms),
        offline_after_ms_(offline_after_ms) {}

  // Registers a device, or re-registers one with the same name (same id).
  // ALREADY_EXISTS while the name has a live session, unless
  // `presented_session_key` is that session's key; INVALID_ARGUMENT for an
  // empty name.
  absl::StatusOr<AgentSession> Register(const DeviceIdentity& device,
                                        const std::string& presented_session_key);
  // UNAUTHENTICATED unless `session_key` is the agent's current key
  // (compared in constant time, an unknown agent against a dummy).
  absl::Status CheckSession(const std::string& agent_id, const std::string& session_key);
  // Records that the agent was heard from at `now`; NOT_FOUND for an
  // unknown agent.
  absl::Status Touch(const std::string& agent_id, int64_t now);
  // The same for many; unknown ids are ignored.
  absl::Status TouchAll(const std::vector<std::string>& agent_ids, int64_t now);
  // Counts a finished job against the agent.
  absl::Status CountJob(const std::string& agent_id, bool done);

  // NOT_FOUND for an unknown agent. The state is derived from the clock and
  // whether the agent holds an active lease; the canary fields from `canaries`.
  absl::StatusOr<AgentRecord> Get(const std::string& agent_id);
  absl::StatusOr<std::vector<AgentRecord>> List();  // by name

 private:
  SqliteDb* db_;        // not owned
  const Clock* clock_;  // not owned
  const int64_t session_ttl_ms_;
  const int64_t offline_after_ms_;
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_AGENT_REGISTRY_H_
