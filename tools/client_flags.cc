// The coordinator-address, token and TLS flags every client of a
// coordinator reads (coordinator_client.h); apart from cmd_coordinator.cc so
// the agent-only binary (agent_main.cc) links without the coordinator.
#include <cstdlib>
#include <string>

#include "tools/coordinator_client.h"

namespace hilnas::tools {

namespace {

// The flag's value, else the environment variable's, else empty.
std::string FlagOrEnv(const std::string& flag, const char* env) {
  if (!flag.empty()) return flag;
  const char* v = std::getenv(env);
  return v != nullptr ? v : "";
}

}  // namespace

std::string CoordinatorAddress(const CommandLine& cl) {
  const std::string address = FlagOrEnv(cl.coordinator, "HILNAS_COORDINATOR");
  return address.empty() ? "127.0.0.1:50051" : address;
}

std::string EnrollmentToken(const CommandLine& cl) { return FlagOrEnv(cl.token, "HILNAS_TOKEN"); }

std::string UserTokenOf(const CommandLine& cl) {
  return FlagOrEnv(cl.user_token, "HILNAS_USER_TOKEN");
}

ClientTls ClientTlsOf(const CommandLine& cl) {
  ClientTls tls;
  tls.ca_file = FlagOrEnv(cl.tls_ca, "HILNAS_TLS_CA");
  tls.cert_file = cl.tls_cert;
  tls.key_file = cl.tls_key;
  tls.server_name = cl.tls_server_name;
  return tls;
}

}  // namespace hilnas::tools
