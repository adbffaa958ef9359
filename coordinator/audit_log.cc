#include "coordinator/audit_log.h"

#include <algorithm>

#include "util/status_macros.h"

namespace hilnas {

absl::StatusOr<std::unique_ptr<AuditLog>> AuditLog::Open(const std::string& path,
                                                         const Clock* clock) {
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  HILNAS_RETURN_IF_ERROR(db->Exec(R"sql(
CREATE TABLE IF NOT EXISTS audit(
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  time_ms INTEGER NOT NULL,
  credential TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT NOT NULL,
  outcome TEXT NOT NULL);
)sql"));
  return std::unique_ptr<AuditLog>(new AuditLog(std::move(db), clock));
}

absl::Status AuditLog::Record(const std::string& credential, const std::string& action,
                              const std::string& target, const std::string& outcome) {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement ins,
      db_->Prepare("INSERT INTO audit(time_ms, credential, action, target, outcome) "
                   "VALUES(?, ?, ?, ?, ?)"));
  // A target or outcome from the network is bounded before it is stored.
  auto bounded = [](const std::string& s) { return s.substr(0, 1000); };
  return ins.Bind(1, clock_->NowMs())
      .Bind(2, credential)
      .Bind(3, action)
      .Bind(4, bounded(target))
      .Bind(5, bounded(outcome))
      .Run();
}

absl::StatusOr<std::vector<AuditEntry>> AuditLog::Newest(int limit) {
  absl::MutexLock lock(&mu_);
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT id, time_ms, credential, action, target, outcome FROM audit "
                   "ORDER BY id DESC LIMIT ?"));
  q.Bind(1, static_cast<int64_t>(limit));
  std::vector<AuditEntry> out;
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    out.push_back({q.Int(0), q.Int(1), q.Text(2), q.Text(3), q.Text(4), q.Text(5)});
  }
  std::reverse(out.begin(), out.end());
  return out;
}

}  // namespace hilnas
