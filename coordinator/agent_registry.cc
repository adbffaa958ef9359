#include "coordinator/agent_registry.h"

#include "absl/strings/str_cat.h"
#include "coordinator/job_schema.h"
#include "util/secrets.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

absl::Status UnknownAgent(const std::string& agent_id) {
  return absl::NotFoundError(absl::StrCat("unknown agent \"", agent_id, "\"; register first"));
}

}  // namespace

absl::StatusOr<AgentSession> AgentRegistry::Register(const DeviceIdentity& device,
                                                     const std::string& presented_session_key) {
  if (device.name().empty()) return absl::InvalidArgumentError("device name is empty");
  const int64_t now = clock_->NowMs();
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT agent_id, last_heartbeat_ms, session_hash FROM agents WHERE name = ?"));
  q.Bind(1, device.name());
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (row) {
    // One live session per name: two agents measuring under one name would
    // share leases and contaminate each other's timings. A name is free once
    // its agent has been silent for a lease's lifetime (its lease expired).
    const int64_t silent_ms = now - q.Int(1);
    const std::string live_hash = q.Text(2);
    // The agent that holds the session (presenting its key) may register
    // again at once: a restart that kept its key resumes its lease.
    const bool holder =
        !presented_session_key.empty() && SecretEquals(live_hash, Sha256Hex(presented_session_key));
    if (!holder && !live_hash.empty() && silent_ms < session_ttl_ms_) {
      return absl::AlreadyExistsError(absl::StrCat(
          "agent name \"", device.name(), "\" has a live session (heard from ", silent_ms,
          " ms ago); another agent may take the name once it has been silent for ", session_ttl_ms_,
          " ms. Give each device its own --name"));
    }
  }
  AgentSession session;
  // A new key on every registration: the previous session of this name
  // ends here (its next call is UNAUTHENTICATED).
  session.session_key = RandomHex(32);
  const std::string hash = Sha256Hex(session.session_key);
  if (row) {
    session.agent_id = q.Text(0);
    HILNAS_ASSIGN_OR_RETURN(SqliteStatement u,
                            db_->Prepare("UPDATE agents SET device = ?, last_heartbeat_ms = ?, "
                                         "session_hash = ? WHERE agent_id = ?"));
    HILNAS_RETURN_IF_ERROR(u.BindBlob(1, device.SerializeAsString())
                               .Bind(2, now)
                               .Bind(3, hash)
                               .Bind(4, session.agent_id)
                               .Run());
    return session;
  }
  session.agent_id = RandomId("agent-");
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement ins,
      db_->Prepare("INSERT INTO agents(agent_id, name, device, registered_ms, "
                   "last_heartbeat_ms, session_hash) VALUES(?, ?, ?, ?, ?, ?)"));
  HILNAS_RETURN_IF_ERROR(ins.Bind(1, session.agent_id)
                             .Bind(2, device.name())
                             .BindBlob(3, device.SerializeAsString())
                             .Bind(4, now)
                             .Bind(5, now)
                             .Bind(6, hash)
                             .Run());
  return session;
}

absl::Status AgentRegistry::CheckSession(const std::string& agent_id,
                                         const std::string& session_key) {
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("SELECT session_hash FROM agents WHERE agent_id = ?"));
  q.Bind(1, agent_id);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  // Hashes of equal length, compared in constant time; an unknown agent is
  // compared against a dummy so the answer's timing says nothing either.
  const std::string stored = row ? q.Text(0) : std::string(64, '0');
  const bool match = SecretEquals(stored, Sha256Hex(session_key)) && row && !stored.empty() &&
                     !session_key.empty();
  if (!match) {
    return absl::UnauthenticatedError(absl::StrCat(
        "agent \"", agent_id, "\": session key missing or not current; register again"));
  }
  return absl::OkStatus();
}

absl::Status AgentRegistry::Touch(const std::string& agent_id, int64_t now) {
  HILNAS_RETURN_IF_ERROR(TouchAll({agent_id}, now));
  // Changes() counts the rows of the one UPDATE TouchAll ran.
  if (db_->Changes() == 0) return UnknownAgent(agent_id);
  return absl::OkStatus();
}

absl::Status AgentRegistry::TouchAll(const std::vector<std::string>& agent_ids, int64_t now) {
  for (const std::string& id : agent_ids) {
    HILNAS_ASSIGN_OR_RETURN(
        SqliteStatement u,
        db_->Prepare("UPDATE agents SET last_heartbeat_ms = ? WHERE agent_id = ?"));
    HILNAS_RETURN_IF_ERROR(u.Bind(1, now).Bind(2, id).Run());
  }
  return absl::OkStatus();
}

absl::Status AgentRegistry::CountJob(const std::string& agent_id, bool done) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement u,
      db_->Prepare(done ? "UPDATE agents SET jobs_done = jobs_done + 1 WHERE agent_id = ?"
                        : "UPDATE agents SET jobs_failed = jobs_failed + 1 WHERE agent_id = ?"));
  return u.Bind(1, agent_id).Run();
}

absl::StatusOr<AgentRecord> AgentRegistry::Get(const std::string& agent_id) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT device, registered_ms, last_heartbeat_ms, jobs_done, jobs_failed, "
                   "(SELECT COUNT(*) FROM leases WHERE agent_id = a.agent_id AND "
                   "state = ?) FROM agents a WHERE agent_id = ?"));
  q.Bind(1, LeaseStateText(LeaseState::kActive)).Bind(2, agent_id);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return UnknownAgent(agent_id);
  AgentRecord a;
  a.agent_id = agent_id;
  HILNAS_RETURN_IF_ERROR(q.ParseBlob(0, &a.device, absl::StrCat("agent ", agent_id, "'s device")));
  a.registered_ms = q.Int(1);
  a.last_heartbeat_ms = q.Int(2);
  a.jobs_done = q.Int(3);
  a.jobs_failed = q.Int(4);
  a.state = AgentStateOf(
      /*heartbeat_fresh=*/clock_->NowMs() - a.last_heartbeat_ms <= offline_after_ms_,
      /*holds_lease=*/q.Int(5) > 0);
  HILNAS_ASSIGN_OR_RETURN(auto newest, CanaryLog(db_).Newest(agent_id));
  a.canaries = newest.first;
  a.last_canary = std::move(newest.second);
  return a;
}

absl::StatusOr<std::vector<AgentRecord>> AgentRegistry::List() {
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("SELECT agent_id FROM agents ORDER BY name"));
  std::vector<std::string> ids;
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    ids.push_back(q.Text(0));
  }
  std::vector<AgentRecord> out;
  for (const std::string& id : ids) {
    HILNAS_ASSIGN_OR_RETURN(AgentRecord a, Get(id));
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace hilnas
