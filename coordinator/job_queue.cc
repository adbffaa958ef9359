#include "coordinator/job_queue.h"

#include "absl/strings/str_cat.h"
#include "proto/benchmark_request.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

bool ServesPool(const DeviceIdentity& d, const std::string& pool) {
  if (pool.empty()) return true;
  for (const std::string& p : d.pools()) {
    if (p == pool) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<int64_t> JobQueue::Submit(const BenchmarkRequest& request, const std::string& device,
                                         const std::string& pool, const std::string& client_key) {
  HILNAS_RETURN_IF_ERROR(ValidateBenchmarkRequest(request));
  if (!client_key.empty()) {
    HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                            db_->Prepare("SELECT job_id FROM jobs WHERE client_key = ?"));
    q.Bind(1, client_key);
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (row) return q.Int(0);
  }
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement ins,
      db_->Prepare("INSERT INTO jobs(request, device, pool, state, created_ms, client_key) "
                   "VALUES(?, ?, ?, ?, ?, ?)"));
  ins.BindBlob(1, request.SerializeAsString())
      .Bind(2, device)
      .Bind(3, pool)
      .Bind(4, static_cast<int64_t>(QUEUED))
      .Bind(5, clock_->NowMs());
  if (!client_key.empty()) ins.Bind(6, client_key);  // else NULL: no key
  HILNAS_RETURN_IF_ERROR(ins.Run());
  return db_->LastInsertRowId();
}

absl::StatusOr<bool> JobQueue::HasLeasable() {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare(
          "SELECT EXISTS(SELECT 1 FROM jobs INDEXED BY jobs_leasable WHERE state IN (1, 5))"));
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  return row && q.Int(0) != 0;
}

absl::StatusOr<int64_t> JobQueue::Unfinished() {
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("SELECT COUNT(*) FROM jobs WHERE state IN (?, ?, ?)"));
  q.Bind(1, static_cast<int64_t>(QUEUED))
      .Bind(2, static_cast<int64_t>(LEASED))
      .Bind(3, static_cast<int64_t>(STALE));
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  return row ? q.Int(0) : 0;
}

absl::StatusOr<std::optional<JobRecord>> JobQueue::NextFor(const DeviceIdentity& device) {
  static_assert(QUEUED == 1 && STALE == 5, "jobs_leasable and this query name the states");
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT job_id, request, pool FROM jobs INDEXED BY jobs_leasable WHERE state IN "
                   "(1, 5) AND (device = '' OR device = ?) ORDER BY job_id"));
  q.Bind(1, device.name());
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) return std::optional<JobRecord>();
    if (!ServesPool(device, q.Text(2))) continue;
    JobRecord j;
    j.job_id = q.Int(0);
    HILNAS_RETURN_IF_ERROR(
        q.ParseBlob(1, &j.request, absl::StrCat("job ", j.job_id, "'s request")));
    j.pool = q.Text(2);
    return std::optional<JobRecord>(std::move(j));
  }
}

absl::StatusOr<BenchmarkRequest> JobQueue::Request(int64_t job_id) {
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement q,
                          db_->Prepare("SELECT request FROM jobs WHERE job_id = ?"));
  q.Bind(1, job_id);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
  BenchmarkRequest r;
  HILNAS_RETURN_IF_ERROR(q.ParseBlob(0, &r, absl::StrCat("job ", job_id, "'s request")));
  return r;
}

absl::Status JobQueue::MarkLeased(int64_t job_id, const std::string& agent_id) {
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement u,
                          db_->Prepare("UPDATE jobs SET state = ?, attempts = attempts + 1, "
                                       "agent_id = ? WHERE job_id = ?"));
  return u.Bind(1, static_cast<int64_t>(LEASED)).Bind(2, agent_id).Bind(3, job_id).Run();
}

absl::Status JobQueue::ReturnExpired(int64_t job_id, bool give_up, const std::string& message,
                                     int64_t now) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement u,
      db_->Prepare("UPDATE jobs SET state = ?, message = ?, finished_ms = ? WHERE job_id = ?"));
  return u.Bind(1, static_cast<int64_t>(give_up ? JOB_FAILED : STALE))
      .Bind(2, message)
      .Bind(3, give_up ? now : 0)
      .Bind(4, job_id)
      .Run();
}

absl::Status JobQueue::RequeueForDrift(int64_t job_id, const std::string& message) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement u,
      db_->Prepare("UPDATE jobs SET state = ?, drift_requeues = drift_requeues + 1, "
                   "message = ? WHERE job_id = ?"));
  return u.Bind(1, static_cast<int64_t>(QUEUED)).Bind(2, message).Bind(3, job_id).Run();
}

absl::Status JobQueue::Finish(int64_t job_id, bool done, const BenchmarkResult& result,
                              const std::string& message, int64_t now) {
  HILNAS_ASSIGN_OR_RETURN(SqliteStatement u,
                          db_->Prepare("UPDATE jobs SET state = ?, result = ?, finished_ms = ?, "
                                       "message = ? WHERE job_id = ?"));
  return u.Bind(1, static_cast<int64_t>(done ? JOB_DONE : JOB_FAILED))
      .BindBlob(2, result.SerializeAsString())
      .Bind(3, now)
      .Bind(4, message)
      .Bind(5, job_id)
      .Run();
}

absl::StatusOr<JobRecord> JobQueue::Get(int64_t job_id) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT request, device, pool, state, attempts, agent_id, created_ms, "
                   "finished_ms, result, message, drift_requeues FROM jobs WHERE job_id = ?"));
  q.Bind(1, job_id);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
  JobRecord j;
  j.job_id = job_id;
  HILNAS_RETURN_IF_ERROR(q.ParseBlob(0, &j.request, absl::StrCat("job ", job_id, "'s request")));
  j.device = q.Text(1);
  j.pool = q.Text(2);
  j.state = static_cast<JobState>(q.Int(3));
  j.attempts = static_cast<int>(q.Int(4));
  j.agent_id = q.Text(5);
  j.created_ms = q.Int(6);
  j.finished_ms = q.Int(7);
  if (!q.IsNull(8)) {
    j.result.emplace();
    if (!j.result->ParseFromString(q.Blob(8))) {
      return absl::DataLossError(absl::StrCat("job ", job_id, ": stored result does not parse"));
    }
  }
  j.message = q.Text(9);
  j.drift_requeues = static_cast<int>(q.Int(10));
  return j;
}

absl::StatusOr<int> JobQueue::AttemptsCounted(int64_t job_id) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT attempts - drift_requeues FROM jobs WHERE job_id = ?"));
  q.Bind(1, job_id);
  HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
  if (!row) return absl::NotFoundError(absl::StrCat("unknown job ", job_id));
  return static_cast<int>(q.Int(0));
}

}  // namespace hilnas
