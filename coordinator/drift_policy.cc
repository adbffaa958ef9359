#include "coordinator/drift_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

// The 10th percentile (the lower of the two around it); 0 for none.
double LowPercentile(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const size_t k = (v.size() - 1) / 10;
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

}  // namespace

absl::Status CheckCanaryReading(const std::string& agent_id, const CanaryReading& reading) {
  const double ttft = reading.ttft_ms();
  const double decode = reading.decode_ms_per_token();
  if (!(std::isfinite(ttft) && ttft > 0) || !(std::isfinite(decode) && decode >= 0) ||
      reading.measured_unix_ms() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("agent %s: canary reading with TTFT %g ms, decode %g ms/token at %d ms "
                        "is not a measurement",
                        agent_id, ttft, decode, reading.measured_unix_ms()));
  }
  return absl::OkStatus();
}

void JudgeCanary(const DriftPolicy& policy, const CanaryHistory& history, CanaryReading& reading) {
  const double ttft = reading.ttft_ms();
  const double decode = reading.decode_ms_per_token();
  std::vector<double> ttfts = history.ttft_ms;
  ttfts.push_back(ttft);
  std::vector<double> decodes;
  for (double d : history.decode_ms_per_token) {
    if (d > 0) decodes.push_back(d);
  }
  if (decode > 0) decodes.push_back(decode);
  const double base_ttft = LowPercentile(std::move(ttfts));
  const double base_decode = LowPercentile(std::move(decodes));
  reading.set_baseline_ttft_ms(base_ttft);
  reading.set_baseline_decode_ms_per_token(base_decode);
  reading.set_ttft_ratio(ttft / base_ttft);  // > 0: base_ttft is one of the positive readings
  reading.set_decode_ratio(decode > 0 && base_decode > 0 ? decode / base_decode : 1.0);
  reading.set_drifted(reading.ttft_ratio() > 1 + policy.tolerance ||
                      reading.decode_ratio() > 1 + policy.tolerance);
  reading.set_requeues(0);
}

bool RequeueForDrift(const DriftPolicy& policy, const CanaryReading& reading, int requeues) {
  return reading.drifted() && requeues < policy.max_requeues;
}

std::string DriftRequeueMessage(const DriftPolicy& policy, const CanaryReading& reading,
                                int requeues) {
  return absl::StrFormat(
      "canary at %.2fx TTFT, %.2fx decode of the agent's baseline (tolerance %.2f); re-queued "
      "(%d of %d)",
      reading.ttft_ratio(), reading.decode_ratio(), policy.tolerance, requeues + 1,
      policy.max_requeues);
}

absl::StatusOr<CanaryHistory> CanaryLog::History(const std::string& agent_id,
                                                 const CanaryReading& reading, int limit) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement q,
      db_->Prepare("SELECT ttft_ms, decode_ms FROM canaries WHERE agent_id = ? AND request = ? "
                   "AND measured_ms <> ? ORDER BY measured_ms DESC LIMIT ?"));
  q.Bind(1, agent_id)
      .BindBlob(2, reading.request().SerializeAsString())
      .Bind(3, reading.measured_unix_ms())
      .Bind(4, static_cast<int64_t>(limit));
  CanaryHistory h;
  while (true) {
    HILNAS_ASSIGN_OR_RETURN(bool row, q.Step());
    if (!row) break;
    h.ttft_ms.push_back(q.Double(0));
    h.decode_ms_per_token.push_back(q.Double(1));
  }
  return h;
}

absl::Status CanaryLog::Record(const std::string& agent_id, const CanaryReading& reading) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement ins,
      db_->Prepare("INSERT OR IGNORE INTO canaries(agent_id, measured_ms, request, ttft_ms, "
                   "decode_ms, reading) VALUES(?, ?, ?, ?, ?, ?)"));
  return ins.Bind(1, agent_id)
      .Bind(2, reading.measured_unix_ms())
      .BindBlob(3, reading.request().SerializeAsString())
      .BindDouble(4, reading.ttft_ms())
      .BindDouble(5, reading.decode_ms_per_token())
      .BindBlob(6, reading.SerializeAsString())
      .Run();
}

absl::StatusOr<std::pair<int, std::optional<CanaryReading>>> CanaryLog::Newest(
    const std::string& agent_id) {
  HILNAS_ASSIGN_OR_RETURN(
      SqliteStatement c,
      db_->Prepare("SELECT (SELECT COUNT(*) FROM canaries WHERE agent_id = ?1), (SELECT reading "
                   "FROM canaries WHERE agent_id = ?1 ORDER BY measured_ms DESC LIMIT 1)"));
  c.Bind(1, agent_id);
  HILNAS_ASSIGN_OR_RETURN(bool row, c.Step());
  std::pair<int, std::optional<CanaryReading>> out{0, std::nullopt};
  if (row && c.Int(0) > 0) {
    out.first = static_cast<int>(c.Int(0));
    out.second.emplace();
    HILNAS_RETURN_IF_ERROR(
        c.ParseBlob(1, &*out.second, absl::StrCat("agent ", agent_id, "'s canary")));
  }
  return out;
}

}  // namespace hilnas
