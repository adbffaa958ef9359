#include "coordinator/job_store.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/job_schema.h"
#include "util/status_macros.h"

namespace hilnas {

JobStore::JobStore(std::unique_ptr<SqliteDb> db, const Clock* clock, const JobStoreOptions& options)
    : db_(std::move(db)),
      clock_(clock),
      options_(options),
      agents_(db_.get(), clock, options.lease_ttl_ms, options.offline_after_ms),
      jobs_(db_.get(), clock),
      leases_(db_.get()),
      canaries_(db_.get()) {}

absl::StatusOr<std::unique_ptr<JobStore>> JobStore::Open(const std::string& path,
                                                         const Clock* clock,
                                                         const JobStoreOptions& options) {
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<SqliteDb> db, SqliteDb::Open(path));
  HILNAS_RETURN_IF_ERROR(CreateJobSchema(*db));
  return std::unique_ptr<JobStore>(new JobStore(std::move(db), clock, options));
}

absl::Status JobStore::TouchLocked(const std::string& agent_id, int64_t now) {
  HILNAS_RETURN_IF_ERROR(agents_.Touch(agent_id, now));
  return ExpireLocked(now).status();
}

absl::StatusOr<AgentSession> JobStore::RegisterAgent(const DeviceIdentity& device,
                                                     const std::string& presented_session_key) {
  absl::MutexLock lock(&mu_);
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_ASSIGN_OR_RETURN(AgentSession session, agents_.Register(device, presented_session_key));
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return session;
}

absl::Status JobStore::CheckSession(const std::string& agent_id, const std::string& session_key) {
  absl::MutexLock lock(&mu_);
  return agents_.CheckSession(agent_id, session_key);
}

absl::Status JobStore::TouchAgents(const std::vector<std::string>& agent_ids) {
  absl::MutexLock lock(&mu_);
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_RETURN_IF_ERROR(agents_.TouchAll(agent_ids, clock_->NowMs()));
  return tx.Commit();
}

absl::StatusOr<bool> JobStore::HasLeasableJobs() {
  absl::MutexLock lock(&mu_);
  return jobs_.HasLeasable();
}

absl::StatusOr<int64_t> JobStore::UnfinishedJobs() {
  absl::MutexLock lock(&mu_);
  return jobs_.Unfinished();
}

absl::StatusOr<bool> JobStore::Heartbeat(const std::string& agent_id, const std::string& lease_id) {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_->NowMs();
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_RETURN_IF_ERROR(TouchLocked(agent_id, now));
  bool valid = false;
  if (!lease_id.empty()) {
    HILNAS_ASSIGN_OR_RETURN(valid, leases_.Renew(agent_id, lease_id, now + options_.lease_ttl_ms));
  }
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return valid;
}

absl::StatusOr<int64_t> JobStore::SubmitJob(const BenchmarkRequest& request,
                                            const std::string& device, const std::string& pool,
                                            const std::string& client_key) {
  absl::MutexLock lock(&mu_);
  return jobs_.Submit(request, device, pool, client_key);
}

absl::StatusOr<int> JobStore::ExpireLocked(int64_t now) {
  HILNAS_ASSIGN_OR_RETURN(std::vector<Lease> expired, leases_.ExpireDue(now));
  for (const Lease& e : expired) {
    HILNAS_ASSIGN_OR_RETURN(const int attempts, jobs_.AttemptsCounted(e.job_id));
    // A lease expires only when its agent stopped renewing it: the agent
    // died (or lost its network) during the job. Say so, and name every
    // agent this job took down, so a job that crashes runtimes is not
    // handed to agent after agent in silence.
    HILNAS_ASSIGN_OR_RETURN(std::vector<std::string> died, leases_.ExpiredHolders(e.job_id));
    const bool give_up = attempts >= options_.max_attempts;
    const std::string message =
        give_up ? absl::StrCat("agent died during the job ", attempts, " times (",
                               absl::StrJoin(died, ", "),
                               ": no heartbeat until the lease expired); the job may "
                               "crash the runtime; giving up")
                : absl::StrCat("agent died during the job (", died.empty() ? "?" : died.back(),
                               ": no heartbeat until lease ", e.lease_id,
                               " expired); back in the queue");
    HILNAS_RETURN_IF_ERROR(jobs_.ReturnExpired(e.job_id, give_up, message, now));
  }
  return static_cast<int>(expired.size());
}

absl::StatusOr<int> JobStore::ExpireLeases() {
  absl::MutexLock lock(&mu_);
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_ASSIGN_OR_RETURN(int n, ExpireLocked(clock_->NowMs()));
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return n;
}

absl::StatusOr<std::optional<Lease>> JobStore::LeaseJob(const std::string& agent_id) {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_->NowMs();
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_RETURN_IF_ERROR(TouchLocked(agent_id, now));
  HILNAS_ASSIGN_OR_RETURN(AgentRecord agent, agents_.Get(agent_id));
  const int64_t expires_ms = now + options_.lease_ttl_ms;
  // A restarted agent first gets back the lease it held (OSS Vizier does the
  // same for a client id), so its half-done job is not left to expire.
  HILNAS_ASSIGN_OR_RETURN(std::optional<Lease> lease, leases_.ActiveOf(agent_id));
  if (lease.has_value()) {
    HILNAS_ASSIGN_OR_RETURN(lease->request, jobs_.Request(lease->job_id));
    HILNAS_RETURN_IF_ERROR(leases_.Renew(agent_id, lease->lease_id, expires_ms).status());
    lease->expires_ms = expires_ms;
    HILNAS_RETURN_IF_ERROR(tx.Commit());
    return lease;
  }
  HILNAS_ASSIGN_OR_RETURN(std::optional<JobRecord> next, jobs_.NextFor(agent.device));
  if (!next.has_value()) {
    HILNAS_RETURN_IF_ERROR(tx.Commit());  // keeps the heartbeat and expiries
    return std::optional<Lease>();
  }
  lease.emplace();
  lease->job_id = next->job_id;
  lease->request = std::move(next->request);
  lease->expires_ms = expires_ms;
  HILNAS_ASSIGN_OR_RETURN(lease->lease_id, leases_.Grant(lease->job_id, agent_id, now, expires_ms));
  HILNAS_RETURN_IF_ERROR(jobs_.MarkLeased(lease->job_id, agent_id));
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return lease;
}

absl::StatusOr<bool> JobStore::JudgeDriftLocked(const std::string& agent_id, int64_t job_id,
                                                CanaryReading& reading) {
  HILNAS_RETURN_IF_ERROR(CheckCanaryReading(agent_id, reading));
  HILNAS_ASSIGN_OR_RETURN(CanaryHistory history, canaries_.History(agent_id, reading));
  const DriftPolicy policy{options_.canary_tolerance, options_.max_drift_requeues};
  JudgeCanary(policy, history, reading);
  HILNAS_RETURN_IF_ERROR(canaries_.Record(agent_id, reading));
  absl::StatusOr<JobRecord> job = jobs_.Get(job_id);
  const int requeues = job.ok() ? job->drift_requeues : 0;
  reading.set_requeues(requeues);
  if (!RequeueForDrift(policy, reading, requeues)) return false;
  // The measurement is not trusted: the job goes back to the queue (the
  // agent re-times its canary before its next job). Nothing is stored but
  // the reason.
  HILNAS_RETURN_IF_ERROR(
      jobs_.RequeueForDrift(job_id, DriftRequeueMessage(policy, reading, requeues)));
  return true;
}

absl::StatusOr<ReportOutcome> JobStore::ReportResult(const std::string& agent_id, int64_t job_id,
                                                     const std::string& lease_id,
                                                     const BenchmarkResult& result,
                                                     CanaryReading* canary) {
  absl::MutexLock lock(&mu_);
  const int64_t now = clock_->NowMs();
  SqliteTransaction tx(db_.get());
  HILNAS_RETURN_IF_ERROR(tx.begun());
  HILNAS_RETURN_IF_ERROR(TouchLocked(agent_id, now));
  HILNAS_ASSIGN_OR_RETURN(LeaseState state,
                          leases_.StateForReport(lease_id, agent_id, job_id, now));
  if (state == LeaseState::kReported) return ReportOutcome::kDuplicate;
  HILNAS_RETURN_IF_ERROR(leases_.MarkReported(lease_id, now));
  const bool ok = result.failure() == FAILURE_NONE;
  // Stored as received, except for a canary, which is stored with its verdict.
  const BenchmarkResult* stored = &result;
  BenchmarkResult judged;
  if (ok && result.has_canary()) {
    judged = result;
    stored = &judged;
    HILNAS_ASSIGN_OR_RETURN(bool requeued,
                            JudgeDriftLocked(agent_id, job_id, *judged.mutable_canary()));
    if (canary != nullptr) *canary = judged.canary();
    if (requeued) {
      HILNAS_RETURN_IF_ERROR(tx.Commit());
      return ReportOutcome::kRequeuedForDrift;
    }
  }
  HILNAS_RETURN_IF_ERROR(
      jobs_.Finish(job_id, ok, *stored, ok ? std::string() : result.failure_message(), now));
  HILNAS_RETURN_IF_ERROR(agents_.CountJob(agent_id, ok));
  HILNAS_RETURN_IF_ERROR(tx.Commit());
  return ReportOutcome::kAccepted;
}

absl::StatusOr<JobRecord> JobStore::GetJob(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  return jobs_.Get(job_id);
}

absl::StatusOr<std::vector<AgentRecord>> JobStore::ListAgents() {
  absl::MutexLock lock(&mu_);
  return agents_.List();
}

absl::StatusOr<int> JobStore::AcceptedReports(int64_t job_id) {
  absl::MutexLock lock(&mu_);
  return leases_.Reported(job_id);
}

}  // namespace hilnas
