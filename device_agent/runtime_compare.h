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
  // Thread counts timed in turn within each round (1,4: what four cores
  // give each runtime over one, issue 35 item 3); empty: the request's.
  std::vector<int> threads;
  int decode_tokens = 64;
  int repeats = 3;  // timed runs per runtime, prompt and thread count, after one untimed
  std::function<void(const std::string&)> progress;  // one line per run; may be empty
};

// Medians of one prompt length at one thread count; "first" is the runtime
// passed first.
struct CompareRow {
  int prompt = 0;
  int threads = 0;
  double first_ttft_ms = 0, second_ttft_ms = 0;
  double first_decode_ms = 0, second_decode_ms = 0;  // per token after the prompt
};

// What a runtime gains from `to_threads` over `from_threads` (the first of
// CompareOptions::threads) at one prompt length: the median over rounds of
// ms at from_threads / ms at to_threads, both runs of a round back to back.
struct ScalingRow {
  int prompt = 0;
  int from_threads = 0, to_threads = 0;
  double first_ttft_gain = 0, second_ttft_gain = 0;
  double first_decode_gain = 0, second_decode_gain = 0;
};

struct Comparison {
  std::vector<CompareRow> rows;     // prompt by prompt, thread counts in order
  std::vector<ScalingRow> scaling;  // empty with one thread count
};

// Prepares `request`'s model in both runtimes at each thread count (one
// model each: their memory at once), then for each prompt runs rounds of
// first, second at each thread count in turn (`repeats` + 1 rounds, the
// first untimed). With several thread counts, an in-process runtime runs
// the prompt once untimed before each timed run (its threads at a new count
// are new threads; an external runtime's process warms up on its own).
// Errors name the runtime that failed.
absl::StatusOr<Comparison> CompareRuntimes(Runtime& first, Runtime& second,
                                           const BenchmarkRequest& request,
                                           const CompareOptions& options);

// A Markdown table of the rows, ratios first / second (> 1: the first is
// slower); a threads column when the rows have more than one count.
std::string CompareTable(const std::vector<CompareRow>& rows, const std::string& first_name,
                         const std::string& second_name);

// A Markdown table of the gains and first's gain over second's (>= 1: the
// first gains at least as much from the threads).
std::string ScalingTable(const std::vector<ScalingRow>& rows, const std::string& first_name,
                         const std::string& second_name);

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_RUNTIME_COMPARE_H_
