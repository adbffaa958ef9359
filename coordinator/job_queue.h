// Benchmark jobs (the `jobs` table, job_schema.h) and their states
// (lifecycle.h): QUEUED until leased (LEASED), STALE when a lease expired
// (leasable again), DONE or FAILED when over. Submission is idempotent under
// a client key. Who holds a job is the lease table's (lease_table.h).
// `db` and `clock` are not owned; callers serialise access and hold the
// transaction (JobStore does both).
#ifndef HILNAS_COORDINATOR_JOB_QUEUE_H_
#define HILNAS_COORDINATOR_JOB_QUEUE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/sqlite.h"
#include "proto/benchmark.pb.h"
#include "proto/service.pb.h"
#include "util/clock.h"

namespace hilnas {

struct JobRecord {
  int64_t job_id = 0;
  JobState state = QUEUED;
  BenchmarkRequest request;
  std::string device;      // required agent name, or empty
  std::string pool;        // required pool, or empty
  int attempts = 0;        // leases granted
  int drift_requeues = 0;  // results sent back because the agent's canary drifted
  std::string agent_id;    // the last agent that leased it
  int64_t created_ms = 0;
  int64_t finished_ms = 0;
  std::optional<BenchmarkResult> result;
  std::string message;  // why it FAILED without a result
};

// Whether a job is over (DONE or FAILED).
inline bool JobFinished(JobState s) { return s == JOB_DONE || s == JOB_FAILED; }

class JobQueue {
 public:
  JobQueue(SqliteDb* db, const Clock* clock) : db_(db), clock_(clock) {}

  // INVALID_ARGUMENT for a request that cannot run anywhere. A non-empty
  // `client_key` makes submission idempotent: a second submission with the
  // same key returns the first job's id and queues nothing.
  absl::StatusOr<int64_t> Submit(const BenchmarkRequest& request, const std::string& device,
                                 const std::string& pool, const std::string& client_key);
  // Whether any job is QUEUED or STALE.
  absl::StatusOr<bool> HasLeasable();
  // Jobs QUEUED, LEASED or STALE.
  absl::StatusOr<int64_t> Unfinished();
  // The oldest QUEUED or STALE job `device` may run (its name or no device
  // required; one of its pools or none), with its request.
  absl::StatusOr<std::optional<JobRecord>> NextFor(const DeviceIdentity& device);
  absl::StatusOr<BenchmarkRequest> Request(int64_t job_id);
  // QUEUED/STALE -> LEASED by `agent_id`, one more attempt.
  absl::Status MarkLeased(int64_t job_id, const std::string& agent_id);
  // A lease of the job expired: back to STALE, or FAILED with `message`
  // when `give_up`.
  absl::Status ReturnExpired(int64_t job_id, bool give_up, const std::string& message, int64_t now);
  // Back to QUEUED because the agent's canary drifted; one more drift re-queue.
  absl::Status RequeueForDrift(int64_t job_id, const std::string& message);
  // DONE with `result`, or FAILED with `message`.
  absl::Status Finish(int64_t job_id, bool done, const BenchmarkResult& result,
                      const std::string& message, int64_t now);
  // NOT_FOUND for an unknown job.
  absl::StatusOr<JobRecord> Get(int64_t job_id);
  // Attempts that count towards giving up: leases that did not end in a
  // drift re-queue. NOT_FOUND for an unknown job.
  absl::StatusOr<int> AttemptsCounted(int64_t job_id);

 private:
  SqliteDb* db_;        // not owned
  const Clock* clock_;  // not owned
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_JOB_QUEUE_H_
