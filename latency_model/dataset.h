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
};

// The rows of one benchmark result of `arch`: one per prompt length it
// measured, under the device class `device`.
std::vector<LatencyRow> LatencyRowsOf(const Arch& arch, const BenchmarkResult& result,
                                      const std::string& device);

// Writes `rows` with `comment` lines (each prefixed "# ") first.
absl::Status WriteLatencyCsv(const std::string& path, const std::string& comment,
                             const std::vector<LatencyRow>& rows);
// Reads a file written by WriteLatencyCsv; every architecture must be a
// member of `space`. Errors name the file, line and column.
absl::StatusOr<std::vector<LatencyRow>> ReadLatencyCsv(const std::string& path, const Space& space);

}  // namespace hilnas

#endif  // HILNAS_LATENCY_MODEL_DATASET_H_
