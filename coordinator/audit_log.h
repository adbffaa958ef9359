// The coordinator's record of what users did (DESIGN.md, Security): every
// create, start, stop, resume and benchmark submission, with the time, the
// name of the credential that asked, the target and the outcome, in the
// coordinator's SQLite file (table `audit`). Rows are only ever appended.
//
// Thread-safe: one mutex serialises the connection.
#ifndef HILNAS_COORDINATOR_AUDIT_LOG_H_
#define HILNAS_COORDINATOR_AUDIT_LOG_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/sqlite.h"
#include "util/clock.h"

namespace hilnas {

struct AuditEntry {
  int64_t id = 0;
  int64_t time_ms = 0;     // Unix ms
  std::string credential;  // the user token's name ("user" for a lone --user-token)
  std::string action;      // create | start | stop | resume | submit
  std::string target;      // campaign name or job id
  std::string outcome;     // "ok" or the error returned to the caller
};

class AuditLog {
 public:
  // Opens the audit table in `path` (created if missing). `clock` is not
  // owned and must outlive the log.
  static absl::StatusOr<std::unique_ptr<AuditLog>> Open(const std::string& path,
                                                        const Clock* clock);

  absl::Status Record(const std::string& credential, const std::string& action,
                      const std::string& target, const std::string& outcome);
  // The newest `limit` entries, oldest first.
  absl::StatusOr<std::vector<AuditEntry>> Newest(int limit);

 private:
  AuditLog(std::unique_ptr<SqliteDb> db, const Clock* clock) : db_(std::move(db)), clock_(clock) {}
  absl::Mutex mu_;
  std::unique_ptr<SqliteDb> db_ ABSL_GUARDED_BY(mu_);
  const Clock* clock_;  // not owned
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_AUDIT_LOG_H_
