// How hilnas processes secure their gRPC connections: TLS credentials from
// PEM files (server, client, optional mutual TLS), the call metadata that
// carries tokens and session keys, and a channel that attaches that
// metadata to every call. Shared by the coordinator, the agent (which never
// links coordinator code) and the user-side commands.
#ifndef HILNAS_UTIL_GRPC_SECURITY_H_
#define HILNAS_UTIL_GRPC_SECURITY_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace hilnas {

// Call metadata. Tokens travel as "authorization: Bearer TOKEN" (the
// enrollment token on the agent service, a user token on the user
// service); an agent's session key, returned by Register, as
// "x-hilnas-session". gRPC metadata keys are lower case.
inline constexpr char kAuthorizationKey[] = "authorization";
inline constexpr char kSessionKey[] = "x-hilnas-session";
inline constexpr char kBearerPrefix[] = "Bearer ";

// The bearer token in a call's metadata, or empty.
std::string BearerTokenOf(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata);
// The value of `key` in a call's metadata, or empty.
std::string MetadataValue(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                          const std::string& key);

// Reads a PEM file (certificate, key or CA bundle): a regular file under
// 1 MiB holding a "-----BEGIN" block. Errors name `flag` and the path.
absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& flag);

struct ClientTls {
  std::string ca_file;    // verify the server against these roots; empty: plain text
  std::string cert_file;  // client certificate for mutual TLS (with key_file), or empty
  std::string key_file;
  // Name the server's certificate must carry when it differs from the dialled
  // host (a phone dialling 127.0.0.1 through `adb reverse`); empty: the host.
  std::string server_name;
};

struct ServerTls {
  std::string cert_file;  // empty (with key_file): plain text
  std::string key_file;
  std::string client_ca_file;  // set: clients must present a certificate signed by it
};

// Metadata a channel adds to every call it carries (MakeChannel). The
// agent sets its session key here once Register returns it.
class CallMetadata {
 public:
  // Thread-safe. Replaces the value of `key` (or adds it); empty removes it.
  void Set(const std::string& key, const std::string& value);
  std::vector<std::pair<std::string, std::string>> Snapshot() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::pair<std::string, std::string>> values_ ABSL_GUARDED_BY(mu_);
};

// INVALID_ARGUMENT naming the flag for an unreadable or malformed PEM file,
// or a certificate without its key. `metadata` may be null; the channel
// shares its ownership.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& address, const ClientTls& tls, std::shared_ptr<const CallMetadata> metadata,
    grpc::ChannelArguments args = {});

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTls& tls);

// A hint for a failed call: what to check when a TLS handshake or a
// plain-text connection to a TLS port failed. Empty when there is nothing
// to add.
std::string ConnectionHint(const grpc::Status& status, bool client_uses_tls);

}  // namespace hilnas

#endif  // HILNAS_UTIL_GRPC_SECURITY_H_
