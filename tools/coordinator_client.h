// What the user-side commands (bench, agents, latency collect, agent, fleet)
// share for talking to a coordinator; implemented in cmd_coordinator.cc.
#ifndef HILNAS_TOOLS_COORDINATOR_CLIENT_H_
#define HILNAS_TOOLS_COORDINATOR_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/service.grpc.pb.h"
#include "tools/flags.h"
#include "util/grpc_security.h"

namespace hilnas::tools {

// --coordinator, else $HILNAS_COORDINATOR, else 127.0.0.1:50051.
std::string CoordinatorAddress(const CommandLine& cl);
// --token, else $HILNAS_TOKEN, else empty.
std::string EnrollmentToken(const CommandLine& cl);
// --user-token, else $HILNAS_USER_TOKEN, else empty.
std::string UserTokenOf(const CommandLine& cl);
// --tls-ca (else $HILNAS_TLS_CA), --tls-cert, --tls-key, --tls-server-name.
ClientTls ClientTlsOf(const CommandLine& cl);
// A failed call as a status naming `what`, with a hint when the failure
// looks like a TLS mismatch (util/grpc_security.h, ConnectionHint).
absl::Status FromGrpc(const grpc::Status& s, const std::string& what, bool client_uses_tls = false);
// FromGrpc naming the coordinator's address, with the TLS hint when the
// command dialled with --tls-ca.
absl::Status CoordinatorError(const grpc::Status& s, const CommandLine& cl);
// A user-service stub over TLS when --tls-ca is given, carrying the user
// token on every call. INVALID_ARGUMENT for unreadable TLS files.
absl::StatusOr<std::unique_ptr<UserService::Stub>> UserStub(const CommandLine& cl);

// The measurement settings of a benchmark request from the bench flags
// (--prompt-lengths, --decode-tokens, --repeats, ...), without a model.
// INVALID_ARGUMENT names a bad flag value.
absl::StatusOr<BenchmarkRequest> MeasurementOf(const CommandLine& cl);

// Queues `request` for --device / --pool; returns the job id.
absl::StatusOr<std::string> SubmitBenchmark(const CommandLine& cl, UserService::Stub& stub,
                                            const BenchmarkRequest& request);

// Long-polls `job_id` until it is DONE or FAILED, retrying a coordinator
// that is away. `on_state` (may be empty) sees every state change.
// DEADLINE_EXCEEDED after `timeout_s` seconds; 0 waits without limit.
absl::StatusOr<GetJobResponse> WaitForJob(UserService::Stub& stub, const std::string& job_id,
                                          int64_t timeout_s,
                                          const std::function<void(JobState)>& on_state = {});

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COORDINATOR_CLIENT_H_
