#include "coordinator/lease_table.h"

#include "absl/strings/str_cat.h"
#include "coordinator/job_schema.h"
#include "util/status_macros.h"

namespace hilnas {

absl::StatusOr<std::string> LeaseTable::Grant(int64_t job_id, const std::string& agent_id,
                                              int64_t now, int64_t expires_ms) {
  const std::string lease_id = RandomId("lease-");
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement ins,
      db_->Prepare("INSERT INTO leases(lease_id, job_id, agent_id, state, granted_ms, expires_ms) "
                   "VALUES(?, ?, ?, ?, ?, ?)"));
  HILNAS_RETURN_IF_ERROR(ins.Bind(1, lease_id)
                             .Bind(2, job_id)
                             .Bind(3, agent_id)
                             .Bind(4, LeaseStateText(LeaseState::kActive))
                             .Bind(5, now)
                             .Bind(6, expires_ms)
                             .Run());
  return lease_id;
}

absl::StatusOr<std::optional<Lease>> LeaseTable::ActiveOf(const std::string& agent_id) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT lease_id, job_id, expires_ms FROM leases WHERE agent_id = ? AND "
                   "state = ? LIMIT 1"));
  q.Bind(1, agent_id).Bind(2, LeaseStateText(LeaseState::kActive));
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return std::optional<Lease>();
  Lease lease;
  lease.lease_id = q.Text(0);
  lease.job_id = q.Int(1);
  lease.expires_ms = q.Int(2);
  return std::optional<Lease>(std::move(lease));
}

absl::StatusOr<bool> LeaseTable::Renew(const std::string& agent_id, const std::string& lease_id,
                                       int64_t expires_ms) {
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement u,
                          db_->Prepare("UPDATE leases SET expires_ms = ? WHERE lease_id = ? "
                                       "AND agent_id = ? AND state = ?"));
  HILNAS_RETURN_IF_ERROR(u.Bind(1, expires_ms)
                             .Bind(2, lease_id)
                             .Bind(3, agent_id)
                             .Bind(4, LeaseStateText(LeaseState::kActive))
                             .Run());
  return db_->Changes() > 0;
}

absl::StatusOr<std::vector<Lease>> LeaseTable::ExpireDue(int64_t now) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT lease_id, job_id, expires_ms FROM leases WHERE state = ? AND "
                   "expires_ms < ?"));
  q.Bind(1, LeaseStateText(LeaseState::kActive)).Bind(2, now);
  std::vector<Lease> expired;
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    Lease l;
    l.lease_id = q.Text(0);
    l.job_id = q.Int(1);
    l.expires_ms = q.Int(2);
    expired.push_back(std::move(l));
  }
  for (const Lease& l : expired) {
    HILNAS_RETURN_IF_ERROR(CheckLeaseTransition(LeaseState::kActive, LeaseState::kExpired));
    HILNAS_ASSIGN_OR_RETURN(SqliteStatement u,
                            db_->Prepare("UPDATE leases SET state = ? WHERE lease_id = ?"));
    HILNAS_RETURN_IF_ERROR(
        u.Bind(1, LeaseStateText(LeaseState::kExpired)).Bind(2, l.lease_id).Run());
  }
  return expired;
}

absl::StatusOr<std::vector<std::string>> LeaseTable::ExpiredHolders(int64_t job_id) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement who,
      db_->Prepare("SELECT a.name FROM leases l JOIN agents a ON l.agent_id = a.agent_id "
                   "WHERE l.job_id = ? AND l.state = ? ORDER BY l.granted_ms"));
  who.Bind(1, job_id).Bind(2, LeaseStateText(LeaseState::kExpired));
  std::vector<std::string> names;
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, who.Step());
    if (!row) break;
    names.push_back(who.Text(0));
  }
  return names;
}

absl::StatusOr<LeaseState> LeaseTable::StateForReport(const std::string& lease_id,
                                                      const std::string& agent_id, int64_t job_id,
                                                      int64_t now) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT job_id, agent_id, state, expires_ms FROM leases WHERE lease_id = ?"));
  q.Bind(1, lease_id);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("unknown lease \"", lease_id, "\""));
  if (q.Int(0) != job_id || q.Text(1) != agent_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", lease_id, " is not agent ", agent_id, "'s lease for job ", job_id));
  }
  absl::StatusOr<LeaseState> state = ParseLeaseState(q.Text(2));
  if (!state.ok()) {
    return absl::DataLossError(absl::StrCat(db_->path(), ": lease ", lease_id, ": stored state ",
                                            state.status().message()));
  }
  if (*state == LeaseState::kExpired) {
    return absl::FailedPreconditionError(
        absl::StrCat("lease ", lease_id, " for job ", job_id, " expired at ", q.Int(3), " ms (now ",
                     now, "); the job went back to the queue; result rejected"));
  }
  return *state;
}

absl::Status LeaseTable::MarkReported(const std::string& lease_id, int64_t now) {
  HILNAS_RETURN_IF_ERROR(CheckLeaseTransition(LeaseState::kActive, LeaseState::kReported));
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement u,
      db_->Prepare("UPDATE leases SET state = ?, reported_ms = ? WHERE lease_id = ?"));
  return u.Bind(1, LeaseStateText(LeaseState::kReported)).Bind(2, now).Bind(3, lease_id).Run();
}

absl::StatusOr<int> LeaseTable::Reported(int64_t job_id) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT COUNT(*) FROM leases WHERE job_id = ? AND state = ?"));
  q.Bind(1, job_id).Bind(2, LeaseStateText(LeaseState::kReported));
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? static_cast<int>(q.Int(0)) : 0;
}

}  // namespace hilnas
