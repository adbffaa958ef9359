// The rules of a benchmark request that both sides apply: the coordinator
// before it queues a job, the agent before it runs one. Plain protobuf code,
// no libtorch, so the SQLite job store and the arm64 agent share it without
// either linking the other (DESIGN.md, Layout).
#ifndef HILNAS_PROTO_BENCHMARK_REQUEST_H_
#define HILNAS_PROTO_BENCHMARK_REQUEST_H_

#include "absl/status/status.h"
#include "proto/benchmark.pb.h"

namespace hilnas {

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

}  // namespace hilnas

#endif  // HILNAS_PROTO_BENCHMARK_REQUEST_H_
