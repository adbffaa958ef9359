// What the commands that talk to a coordinator share (bench, agents,
// latency collect, campaign, agent, fleet, demo): the connection flags, the
// benchmark-measurement flags, and the calls. Implemented in client.cc
// (flags, agent side too) and coordinator_client.cc (calls).
#ifndef HILNAS_TOOLS_COORDINATOR_CLIENT_H_
#define HILNAS_TOOLS_COORDINATOR_CLIENT_H_

#include <functional>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "proto/service.grpc.pb.h"
#include "util/grpc_security.h"

namespace hilnas::tools {

// How a command reaches its coordinator.
struct ClientFlags {
  std::string coordinator;      // else $HILNAS_COORDINATOR, else 127.0.0.1:50051
  std::string user_token;       // users: else $HILNAS_USER_TOKEN
  std::string token;            // agents: the enrollment token, else $HILNAS_TOKEN
  std::string tls_ca;           // else $HILNAS_TLS_CA
  std::string tls_cert;         // client certificate (mutual TLS)
  std::string tls_key;
  std::string tls_server_name;  // the name on the coordinator's certificate
};
enum class ClientRole { kUser, kAgent };
// Adds --coordinator, the TLS flags and the role's token flag.
void AddClientFlags(CLI::App* app, ClientFlags* flags, ClientRole role);

// --coordinator, else $HILNAS_COORDINATOR, else 127.0.0.1:50051.
std::string CoordinatorAddress(const ClientFlags& flags);
// --token, else $HILNAS_TOKEN, else empty.
std::string EnrollmentToken(const ClientFlags& flags);
// --user-token, else $HILNAS_USER_TOKEN, else empty.
std::string UserTokenOf(const std::string& flag);
// --tls-ca (else $HILNAS_TLS_CA), --tls-cert, --tls-key, --tls-server-name.
ClientTls ClientTlsOf(const ClientFlags& flags);
// A failed call as a status naming `what`, with a hint when the failure
// looks like a TLS mismatch (util/grpc_security.h, ConnectionHint).
absl::Status FromGrpc(const grpc::Status& s, const std::string& what, bool client_uses_tls = false);
// FromGrpc naming the coordinator's address, with the TLS hint when the
// command dialled with --tls-ca.
absl::Status CoordinatorError(const grpc::Status& s, const ClientFlags& flags);
// A user-service stub over TLS when --tls-ca is given, carrying the user
// token on every call. INVALID_ARGUMENT for unreadable TLS files.
absl::StatusOr<std::unique_ptr<UserService::Stub>> UserStub(const ClientFlags& flags);

// How a benchmark job measures (bench, latency collect).
struct MeasurementFlags {
  std::string prompt_lengths = "1024,2048,4096";
  int32_t decode_tokens = 16;
  int32_t repeats = 3;
  int32_t max_repeats = 10;
  double max_spread = 0.05;
  int32_t warmups = 1;
  std::string precision = "fp32";
  std::string kv_dtype = "f32";
  int64_t prefill_chunk = 1024;
  int32_t threads = 0;
  uint64_t seed = 0;
  std::string device;  // run on this agent only
  std::string pool;    // or on an agent of this pool
};
void AddMeasurementFlags(CLI::App* app, MeasurementFlags* flags);

// The measurement settings of a benchmark request, without a model.
// INVALID_ARGUMENT names a bad flag value.
absl::StatusOr<BenchmarkRequest> MeasurementOf(const MeasurementFlags& flags);

// Queues `request` for flags.device / flags.pool; returns the job id.
absl::StatusOr<std::string> SubmitBenchmark(const ClientFlags& client,
                                            const MeasurementFlags& flags,
                                            UserService::Stub& stub,
                                            const BenchmarkRequest& request);

// Long-polls `job_id` until it is DONE or FAILED, retrying a coordinator
// that is away. `on_state` (may be empty) sees every state change.
// DEADLINE_EXCEEDED after `timeout_s` seconds; 0 waits without limit.
absl::StatusOr<GetJobResponse> WaitForJob(UserService::Stub& stub, const std::string& job_id,
                                          int64_t timeout_s,
                                          const std::function<void(JobState)>& on_state = {});

// A deadline `ms` from now, for a gRPC call.
std::chrono::system_clock::time_point In(int64_t ms);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COORDINATOR_CLIENT_H_
