// The coordinator-address, token and TLS flags every client of a
// coordinator reads (coordinator_client.h); apart from
// coordinator_client.cc so the agent-only binary (agent_main.cc) links
// without the user-side calls.
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

void AddClientFlags(CLI::App* app, ClientFlags* flags, ClientRole role) {
  app->add_option("--coordinator", flags->coordinator,
                  "coordinator address HOST:PORT; default $HILNAS_COORDINATOR, then "
                  "127.0.0.1:50051");
  if (role == ClientRole::kUser) {
    app->add_option("--user-token", flags->user_token,
                    "user token the coordinator accepts; default $HILNAS_USER_TOKEN");
  } else {
    app->add_option("--token", flags->token,
                    "enrollment token agents present; default $HILNAS_TOKEN");
  }
  app->add_option("--tls-ca", flags->tls_ca,
                  "verify the coordinator's certificate against this CA (PEM); default "
                  "$HILNAS_TLS_CA");
  app->add_option("--tls-cert", flags->tls_cert, "client certificate for mutual TLS (PEM)");
  app->add_option("--tls-key", flags->tls_key, "the private key of --tls-cert (PEM)");
  app->add_option("--tls-server-name", flags->tls_server_name,
                  "the name the coordinator's certificate carries, when it differs from the "
                  "dialled host (a phone through adb reverse dials 127.0.0.1)");
}

std::string CoordinatorAddress(const ClientFlags& flags) {
  const std::string address = FlagOrEnv(flags.coordinator, "HILNAS_COORDINATOR");
  return address.empty() ? "127.0.0.1:50051" : address;
}

std::string EnrollmentToken(const ClientFlags& flags) {
  return FlagOrEnv(flags.token, "HILNAS_TOKEN");
}

std::string UserTokenOf(const std::string& flag) { return FlagOrEnv(flag, "HILNAS_USER_TOKEN"); }

ClientTls ClientTlsOf(const ClientFlags& flags) {
  ClientTls tls;
  tls.ca_file = FlagOrEnv(flags.tls_ca, "HILNAS_TLS_CA");
  tls.cert_file = flags.tls_cert;
  tls.key_file = flags.tls_key;
  tls.server_name = flags.tls_server_name;
  return tls;
}

}  // namespace hilnas::tools
