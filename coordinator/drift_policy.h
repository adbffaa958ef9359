// The drift check's policy (issue 18): each benchmark result carries the
// agent's newest canary reading (CanaryReading); it is judged against the
// agent's baseline for the same canary, and a result whose canary ran more
// than `tolerance` off goes back to the queue, at most `max_requeues` times.
// JudgeCanary is a pure function of the reading and the agent's history;
// CanaryLog keeps the history in the `canaries` table (job_schema.h).
#ifndef HILNAS_COORDINATOR_DRIFT_POLICY_H_
#define HILNAS_COORDINATOR_DRIFT_POLICY_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/sqlite.h"
#include "proto/benchmark.pb.h"

namespace hilnas {

struct DriftPolicy {
  double tolerance = 0.10;  // a ratio above 1 + tolerance, TTFT or decode, is drift
  int max_requeues = 2;     // then the result is kept, marked drifted
};

// Earlier readings of the same canary by the same agent (ms; decode 0 when
// the canary timed no decode tokens).
struct CanaryHistory {
  std::vector<double> ttft_ms, decode_ms_per_token;
};

// INVALID_ARGUMENT naming `agent_id` when `reading` is not a measurement
// (TTFT not positive and finite, decode negative or not finite, no time).
absl::Status CheckCanaryReading(const std::string& agent_id, const CanaryReading& reading);

// Fills in the reading's baselines, ratios and `drifted` (and zeroes its
// requeues): the baseline is the 10th percentile of this reading and its
// history (the fastest while there are at most 10). Interference only adds
// time, and a low percentile rather than the minimum keeps one lucky reading
// from setting it as readings accumulate. Whatever ratios the agent sent
// are overwritten. REQUIRES CheckCanaryReading ok.
void JudgeCanary(const DriftPolicy& policy, const CanaryHistory& history, CanaryReading& reading);

// Whether a job whose judged canary is `reading` and that went back for
// drift `requeues` times already goes back again.
bool RequeueForDrift(const DriftPolicy& policy, const CanaryReading& reading, int requeues);
// Why it went back, for the job's message.
std::string DriftRequeueMessage(const DriftPolicy& policy, const CanaryReading& reading,
                                int requeues);

// The `canaries` table: every reading of every agent, one row per reading.
// `db` is not owned; callers serialise access and hold the transaction.
class CanaryLog {
 public:
  explicit CanaryLog(SqliteDb* db) : db_(db) {}

  // The agent's newest `limit` readings of the canary `reading` timed,
  // other than `reading` itself.
  absl::StatusOr<CanaryHistory> History(const std::string& agent_id, const CanaryReading& reading,
                                        int limit = 500);
  // Records `reading` unless the agent has one taken at the same time.
  absl::Status Record(const std::string& agent_id, const CanaryReading& reading);
  // How many readings the agent has, and its newest (with its ratios).
  absl::StatusOr<std::pair<int, std::optional<CanaryReading>>> Newest(const std::string& agent_id);

 private:
  SqliteDb* db_;  // not owned
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_DRIFT_POLICY_H_
