// The coordinator's durable state for benchmarking: registered agents,
// benchmark jobs and their leases, and results, in one SQLite file.
//
// A job is QUEUED until an agent leases it (LEASED). The agent renews the
// lease by heartbeats; a lease not renewed within lease_ttl_ms expires, the
// job becomes STALE (leasable again, by any agent) and after max_attempts
// expiries FAILED. A report is accepted only on the lease's active lease:
// a late report on an expired lease is rejected, a repeated report on an
// accepted lease is acknowledged without being counted again. So every job
// completes at most once, and exactly once while agents keep coming back.
//
// Thread-safe: one mutex serialises all access; every mutation is one
// SQLite transaction, so a killed coordinator loses nothing it acknowledged.
// The state is in parts, each over its own tables (job_schema.h):
// AgentRegistry (agents and sessions), JobQueue (jobs), LeaseTable (leases)
// and the drift check (drift_policy.h); JobStore composes them, one lock and
// one transaction per call.
#ifndef HILNAS_COORDINATOR_JOB_STORE_H_
#define HILNAS_COORDINATOR_JOB_STORE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/agent_registry.h"
#include "coordinator/drift_policy.h"
#include "coordinator/job_queue.h"
#include "coordinator/lease_table.h"
#include "coordinator/lifecycle.h"
#include "coordinator/sqlite.h"
#include "proto/benchmark.pb.h"
#include "proto/service.pb.h"
#include "util/clock.h"

namespace hilnas {

struct JobStoreOptions {
  int64_t lease_ttl_ms = 30'000;      // a lease lives this long past its last renewal
  int max_attempts = 3;               // lease expiries before a job FAILS
  int64_t offline_after_ms = 30'000;  // no heartbeat for this long: AgentState::kOffline
  // The drift check (CanaryReading): a result whose canary ran more than
  // this fraction off its agent's baseline goes back to the queue, at most
  // max_drift_requeues times; after that it is kept, marked drifted.
  double canary_tolerance = 0.10;
  int max_drift_requeues = 2;
};

enum class ReportOutcome {
  kAccepted,
  kDuplicate,
  kRequeuedForDrift,  // the report was taken, the job went back to the queue
};

class JobStore {
 public:
  // Opens or creates the store in `path`. `clock` is not owned and must
  // outlive the store. INVALID_ARGUMENT for a file that is not a hilnas
  // database or was written by a newer schema.
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path, const Clock* clock,
                                                        const JobStoreOptions& options = {});

  // Registers a device, or re-registers one with the same name (same id, so
  // a restarted agent finds its unfinished lease). Returns the agent id and
  // a new session key, which replaces the name's previous one.
  // ALREADY_EXISTS while the name has a live session (its agent was heard
  // from within lease_ttl_ms: one live session per name), unless
  // `presented_session_key` is that session's key.
  absl::StatusOr<AgentSession> RegisterAgent(const DeviceIdentity& device,
                                             const std::string& presented_session_key = "");
  // OK when `session_key` is `agent_id`'s current key; UNAUTHENTICATED
  // otherwise (unknown agent, empty, stale or wrong key), compared in
  // constant time.
  absl::Status CheckSession(const std::string& agent_id, const std::string& session_key);
  // Records that these agents are alive (parked in a long poll), in one
  // transaction. Unknown ids are ignored.
  absl::Status TouchAgents(const std::vector<std::string>& agent_ids);
  // Whether any job is QUEUED or STALE (a read; touches nothing). Parked
  // long polls ask this before trying to lease.
  absl::StatusOr<bool> HasLeasableJobs();
  // Jobs QUEUED, LEASED or STALE: what a submission limit counts.
  absl::StatusOr<int64_t> UnfinishedJobs();
  // Records liveness and renews `lease_id` when given. Returns whether the
  // lease is still this agent's. NOT_FOUND for an unknown agent.
  absl::StatusOr<bool> Heartbeat(const std::string& agent_id, const std::string& lease_id);
  // INVALID_ARGUMENT for a request that cannot run anywhere. A non-empty
  // `client_key` makes submission idempotent: a second submission with the
  // same key returns the first job's id and queues nothing (a coordinator
  // restarted mid-campaign re-submits without measuring anything twice).
  absl::StatusOr<int64_t> SubmitJob(const BenchmarkRequest& request, const std::string& device,
                                    const std::string& pool, const std::string& client_key = "");
  // The agent's own active lease if it has one (renewed), else the oldest
  // queued or stale job it may run, else nullopt. NOT_FOUND for an unknown agent.
  absl::StatusOr<std::optional<Lease>> LeaseJob(const std::string& agent_id);
  // FAILED_PRECONDITION when the lease expired or is not this agent's lease
  // for this job; NOT_FOUND for unknown agent or lease. A result carrying a
  // canary reading adds it to the agent's history (once per reading) and is
  // judged against the agent's baseline: kRequeuedForDrift when it ran
  // more than canary_tolerance off and the job has retries left. `canary`,
  // when given, receives the reading with its ratios.
  absl::StatusOr<ReportOutcome> ReportResult(const std::string& agent_id, int64_t job_id,
                                             const std::string& lease_id,
                                             const BenchmarkResult& result,
                                             CanaryReading* canary = nullptr);
  // Expires leases past their deadline; returns how many.
  absl::StatusOr<int> ExpireLeases();

  absl::StatusOr<JobRecord> GetJob(int64_t job_id);
  absl::StatusOr<std::vector<AgentRecord>> ListAgents();
  // Reports accepted for `job_id` over all its leases; 1 for a finished job.
  absl::StatusOr<int> AcceptedReports(int64_t job_id);

  const JobStoreOptions& options() const { return options_; }

 private:
  JobStore(std::unique_ptr<SqliteDb> db, const Clock* clock, const JobStoreOptions& options);
  // Every agent call starts here: records the agent's liveness (NOT_FOUND
  // for an unknown agent) and expires overdue leases, inside the caller's
  // transaction.
  absl::Status TouchLocked(const std::string& agent_id, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Expired leases send their jobs back to the queue, or fail them after
  // max_attempts (drift re-queues not counted).
  absl::StatusOr<int> ExpireLocked(int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Judges a result's canary reading (recorded once in the agent's history);
  // whether the job went back to the queue for drift.
  absl::StatusOr<bool> JudgeDriftLocked(const std::string& agent_id, int64_t job_id,
                                        CanaryReading& reading) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::unique_ptr<SqliteDb> db_ ABSL_GUARDED_BY(mu_);
  const Clock* clock_;  // not owned
  const JobStoreOptions options_;
  // The parts, over db_ (guarded by mu_ with it).
  AgentRegistry agents_ ABSL_GUARDED_BY(mu_);
  JobQueue jobs_ ABSL_GUARDED_BY(mu_);
  LeaseTable leases_ ABSL_GUARDED_BY(mu_);
  CanaryLog canaries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_JOB_STORE_H_
