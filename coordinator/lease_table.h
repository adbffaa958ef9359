// Leases (the `leases` table, job_schema.h): which agent holds which job
// until when. A lease is active until its agent reports (reported) or stops
// renewing it past its deadline (expired); the transitions are
// lifecycle.h's. What an expiry does to the job is the queue's
// (job_queue.h). `db` is not owned; callers serialise access and hold the
// transaction (JobStore does both).
#ifndef HILNAS_COORDINATOR_LEASE_TABLE_H_
#define HILNAS_COORDINATOR_LEASE_TABLE_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/lifecycle.h"
#include "coordinator/sqlite.h"
#include "proto/benchmark.pb.h"

namespace hilnas {

struct Lease {
  std::string lease_id;
  int64_t job_id = 0;
  int64_t expires_ms = 0;
  BenchmarkRequest request;
};

class LeaseTable {
 public:
  explicit LeaseTable(SqliteDb* db) : db_(db) {}

  // A new active lease of `job_id` for `agent_id`; its id.
  absl::StatusOr<std::string> Grant(int64_t job_id, const std::string& agent_id, int64_t now,
                                    int64_t expires_ms);
  // The agent's active lease (id and job; no request), if it holds one.
  absl::StatusOr<std::optional<Lease>> ActiveOf(const std::string& agent_id);
  // Moves the deadline of `lease_id` when it is `agent_id`'s and active;
  // whether it was.
  absl::StatusOr<bool> Renew(const std::string& agent_id, const std::string& lease_id,
                             int64_t expires_ms);

  // Marks every active lease whose deadline passed before `now` expired;
  // returns them (id and job).
  absl::StatusOr<std::vector<Lease>> ExpireDue(int64_t now);
  // The names of the agents whose leases of `job_id` expired, oldest first.
  absl::StatusOr<std::vector<std::string>> ExpiredHolders(int64_t job_id);

  // A report on `lease_id`: NOT_FOUND for an unknown lease,
  // FAILED_PRECONDITION when it is not `agent_id`'s lease for `job_id` or
  // it expired (the message says when). Otherwise its state: kActive, or
  // kReported for a repeated report.
  absl::StatusOr<LeaseState> StateForReport(const std::string& lease_id,
                                            const std::string& agent_id, int64_t job_id,
                                            int64_t now);
  // active -> reported.
  absl::Status MarkReported(const std::string& lease_id, int64_t now);
  // Reports accepted for `job_id` over all its leases.
  absl::StatusOr<int> Reported(int64_t job_id);

 private:
  SqliteDb* db_;  // not owned
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_LEASE_TABLE_H_
