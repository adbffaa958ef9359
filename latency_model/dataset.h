// Latency measurements as a data set: one row per (architecture, prompt
// length) with median TTFT and decode time and their standard errors, in a
// CSV file people can read and plot. Architectures are stored by their
// searched fields (layers, widths, pattern); the rest comes from the space.
#ifndef HILNAS_LATENCY_MODEL_DATASET_H_
#define HILNAS_LATENCY_MODEL_DATASET_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/benchmark.pb.h"
#include "search_space/arch.h"
#include "search_space/space.h"

namespace hilnas {

struct LatencyRow {
  std::string device;  // device class (agent name or pool)
  Arch arch;
  int prompt_tokens = 0;
  double ttft_ms = 0, ttft_se_ms = 0;
  double decode_ms = 0, decode_se_ms = 0;  // per token
  int pass = 1;  // test-retest: which measurement pass (`latency collect --passes`)
  // The agent's canary TTFT against its baseline when this was measured
  // (proto CanaryReading); 0 when no canary ran.
  double canary_ratio = 0;
};

// The rows of one benchmark result of `arch`: one per prompt length it
// measured, under the device class `device`.
std::vector<LatencyRow> LatencyRowsOf(const Arch& arch, const BenchmarkResult& result,
                                      const std::string& device);

// Writes `rows` with `comment` lines (each prefixed "# ") first.
absl::Status WriteLatencyCsv(const std::string& path, const std::string& comment,
                             const std::vector<LatencyRow>& rows);
// Reads a file written by WriteLatencyCsv (with or without the `pass` and
// `canary_ratio` columns); every architecture must be a member of `space`. Errors name the
// file, line and column.
absl::StatusOr<std::vector<LatencyRow>> ReadLatencyCsv(const std::string& path, const Space& space);

// One row per (device, architecture, prompt length): passes merged by the
// geometric mean of their medians (standard errors combined as for a mean),
// so repeated measurements of one architecture never sit on both sides of a
// cross-validation split. Rows of a single pass come back unchanged.
std::vector<LatencyRow> MergePasses(const std::vector<LatencyRow>& rows);

// How well one measurement pass predicts another: pass 1 against pass 2 of
// the same (device, architecture) at `prompt_tokens`, on `value` (TTFT or
// decode). The ceiling no latency model of this data can beat (issue 18).
struct RetestAgreement {
  int n = 0;  // architectures measured in both passes
  double r2 = 0, r2_log = 0, tau = 0;
  double within5 = 0, within10 = 0;  // share of pass 2 within +/-5%, 10% of pass 1
};
RetestAgreement TestRetest(const std::vector<LatencyRow>& rows, int prompt_tokens,
                           double (*value)(const LatencyRow&));

}  // namespace hilnas

#endif  // HILNAS_LATENCY_MODEL_DATASET_H_
