// The measurement protocol (MobileLLM-Flash Sec. 4.2.2: 1k/2k/4k prompts,
// warm-up, repeated runs): build once, then for each prompt length warm up
// and repeat timed runs until the spread of TTFT and of decode time is small or a cap is hit,
// cooling down between runs. Every sample is kept; summaries are derived from them.
#ifndef HILNAS_DEVICE_AGENT_PROTOCOL_H_
#define HILNAS_DEVICE_AGENT_PROTOCOL_H_

#include <atomic>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "device_agent/runtime.h"
#include "proto/benchmark.pb.h"

namespace hilnas {

struct ProtocolOptions {
  // Idle time between runs, ms: lets a phone's clocks recover so one run's
  // heat does not slow the next.
  double cooldown_ms = 100;
  // Called with one line per step (build, each run); may be empty.
  std::function<void(const std::string&)> progress;
  // When set and true, measurement stops after the current run and the
  // result fails with RUNTIME_ERROR "cancelled" (the lease was lost). Not owned.
  const std::atomic<bool>* cancel = nullptr;
};

// `request` with every unset field given its documented default:
// prompt lengths {1024, 2048, 4096}, 16 decode tokens, chunk 1024,
// 1 warm-up, 3 repeats (the paper's mean of 3), at most 10 repeats,
// max relative spread 0.05, FP32.
BenchmarkRequest WithDefaults(BenchmarkRequest request);

// Checks a request before it is queued or run; INVALID_ARGUMENT names the field.
absl::Status ValidateBenchmarkRequest(const BenchmarkRequest& request);

// The structured failure a status maps to: RESOURCE_EXHAUSTED -> OUT_OF_MEMORY,
// INVALID_ARGUMENT / UNIMPLEMENTED -> UNSUPPORTED_ARCH, DEADLINE_EXCEEDED ->
// TIMEOUT, anything else -> RUNTIME_ERROR.
FailureKind FailureKindFor(const absl::Status& status);

// Runs the protocol. Never fails silently: any error ends in a result whose
// `failure` and `failure_message` say what happened, with the samples
// measured so far. `device` is copied into the result.
BenchmarkResult MeasureBenchmark(Runtime& runtime, const BenchmarkRequest& request,
                                 const DeviceIdentity& device, const ProtocolOptions& options);

// Fills `result.summaries` and `throttling_suspected` from its samples.
void Summarise(BenchmarkResult& result);

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_PROTOCOL_H_
