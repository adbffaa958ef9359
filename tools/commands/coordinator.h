// `hilnas coordinator`'s options, and the policy it derives from them
// before it opens anything (coordinator_policy.cc).
#ifndef HILNAS_TOOLS_COMMANDS_COORDINATOR_H_
#define HILNAS_TOOLS_COMMANDS_COORDINATOR_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/benchmark_service.h"
#include "proto/service.grpc.pb.h"
#include "util/data_roots.h"
#include "util/grpc_security.h"

namespace hilnas::tools {

struct CoordinatorOptions {
  std::string listen = "127.0.0.1:50051";
  std::string db = "hilnas.db";
  std::string port_file;
  std::string http;
  std::string http_port_file;
  std::string work_dir;
  int64_t lease_ttl_ms = 30'000;
  int64_t heartbeat_ms = 2'000;
  int32_t max_attempts = 3;
  std::string canary_request = "default";
  double canary_tolerance = 0.10;
  int32_t max_drift_requeues = 2;
  std::string token;  // enrollment token, else $HILNAS_TOKEN
  std::string user_token;
  std::string user_tokens_file;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  bool insecure = false;
  std::vector<std::string> data_roots;
  std::vector<std::string> evaluators;
  int64_t max_queued_jobs = 10'000;
  int32_t max_campaigns = 100;
  int64_t max_model_mb = 64 << 10;
  int32_t max_message_mb = 4;
};

// What the coordinator checks before it opens anything: credentials,
// evaluators, data roots, exposure, the canary.
struct Policy {
  ServerTls tls;
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::vector<UserToken> user_tokens;
  std::map<std::string, std::string> evaluators;
  DataRoots roots;
  std::string enrollment_token;
  BenchmarkRequest canary;
};

// Credentials, user tokens, evaluators, data roots and the canary, each
// checked; FAILED_PRECONDITION for an address others can reach without TLS,
// both tokens and a data root, unless --insecure.
absl::StatusOr<Policy> PolicyOf(const CoordinatorOptions& cl);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMANDS_COORDINATOR_H_
