// One architecture timed by two runtimes on this device, run for run:
// hilnas's built-in runtime against llama.cpp's llama-bench on a phone
// (`scripts/phone-agent SERIAL compare`, docs/agents.md) or on a host
// (`hilnas agent --compare-llama-bench PATH`). The runs alternate between
// the two, so a phone warming up or a host growing busy slows both alike;
// the rows are medians.
#ifndef HILNAS_DEVICE_AGENT_RUNTIME_COMPARE_H_
#define HILNAS_DEVICE_AGENT_RUNTIME_COMPARE_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "device_agent/runtime.h"
#include "proto/benchmark.pb.h"

namespace hilnas {

struct CompareOptions {
  std::vector<int> prompts = {256, 1024};  // tokens; decode is timed after each
  int decode_tokens = 64;
  int repeats = 3;  // timed runs per runtime and prompt, after one untimed
  std::function<void(const std::string&)> progress;  // one line per run; may be empty
};

// Medians of one prompt length; "first" is the runtime passed first.
struct CompareRow {
  int prompt = 0;
  double first_ttft_ms = 0, second_ttft_ms = 0;
  double first_decode_ms = 0, second_decode_ms = 0;  // per token after the prompt
};

// Prepares `request`'s model in both runtimes, then for each prompt runs
// first, second, first, ... (`repeats` + 1 times each, the first untimed).
// Errors name the runtime that failed.
absl::StatusOr<std::vector<CompareRow>> CompareRuntimes(Runtime& first, Runtime& second,
                                                        const BenchmarkRequest& request,
                                                        const CompareOptions& options);

// A Markdown table of the rows, ratios first / second (> 1: the first is
// slower).
std::string CompareTable(const std::vector<CompareRow>& rows, const std::string& first_name,
                         const std::string& second_name);

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_RUNTIME_COMPARE_H_
