#include "util/grpc_security.h"

#include <grpcpp/support/client_interceptor.h>
#include <filesystem>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/files.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

constexpr uintmax_t kMaxPemBytes = 1 << 20;

class MetadataInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit MetadataInterceptor(const CallMetadata* metadata) : metadata_(metadata) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      std::multimap<std::string, std::string>* md = methods->GetSendInitialMetadata();
      for (auto& [key, value] : metadata_->Snapshot()) md->emplace(key, value);
    }
    methods->Proceed();
  }

 private:
  const CallMetadata* metadata_;  // owned by the factory, which outlives every call
};

class MetadataInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit MetadataInterceptorFactory(std::shared_ptr<const CallMetadata> metadata)
      : metadata_(std::move(metadata)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new MetadataInterceptor(metadata_.get());
  }

 private:
  std::shared_ptr<const CallMetadata> metadata_;
};

}  // namespace

std::string MetadataValue(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                          const std::string& key) {
  auto it = metadata.find(key);
  if (it == metadata.end()) return "";
  return std::string(it->second.data(), it->second.size());
}

std::string BearerTokenOf(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata) {
  const std::string v = MetadataValue(metadata, kAuthorizationKey);
  if (!absl::StartsWith(v, kBearerPrefix)) return "";
  return v.substr(sizeof(kBearerPrefix) - 1);
}

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& flag) {
  if (absl::Status s = CheckRegularFile(path); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", s.message()));
  }
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxPemBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": ", size, " bytes is too large for a PEM file"));
  }
  std::string pem;
  if (absl::Status s = ReadFileToString(path, &pem); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", s.message()));
  }
  if (pem.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": not a PEM file (no -----BEGIN line)"));
  }
  return pem;
}

void CallMetadata::Set(const std::string& key, const std::string& value) {
  absl::MutexLock lock(&mu_);
  for (auto it = values_.begin(); it != values_.end(); ++it) {
    if (it->first == key) {
      values_.erase(it);
      break;
    }
  }
  if (!value.empty()) values_.emplace_back(key, value);
}

std::vector<std::pair<std::string, std::string>> CallMetadata::Snapshot() const {
  absl::MutexLock lock(&mu_);
  return values_;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& address, const ClientTls& tls, std::shared_ptr<const CallMetadata> metadata,
    grpc::ChannelArguments args) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (tls.ca_file.empty()) {
    if (!tls.cert_file.empty() || !tls.key_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls-cert/--tls-key need --tls-ca (the CA that signed the coordinator's certificate)");
    }
    creds = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions o;
    absl::StatusOr<std::string> ca = ReadPemFile(tls.ca_file, "--tls-ca");
    if (!ca.ok()) return ca.status();
    o.pem_root_certs = *std::move(ca);
    if (tls.cert_file.empty() != tls.key_file.empty()) {
      return absl::InvalidArgumentError("--tls-cert and --tls-key go together (mutual TLS)");
    }
    if (!tls.cert_file.empty()) {
      absl::StatusOr<std::string> cert = ReadPemFile(tls.cert_file, "--tls-cert");
      if (!cert.ok()) return cert.status();
      absl::StatusOr<std::string> key = ReadPemFile(tls.key_file, "--tls-key");
      if (!key.ok()) return key.status();
      o.pem_cert_chain = *std::move(cert);
      o.pem_private_key = *std::move(key);
    }
    creds = grpc::SslCredentials(o);
    if (!tls.server_name.empty()) args.SetSslTargetNameOverride(tls.server_name);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  if (metadata != nullptr) {
    factories.push_back(std::make_unique<MetadataInterceptorFactory>(std::move(metadata)));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, creds, args,
                                                                 std::move(factories));
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const ServerTls& tls) {
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  if (tls.cert_file.empty()) {
    if (!tls.client_ca_file.empty()) {
      return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
  grpc::SslServerCredentialsOptions o(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  absl::StatusOr<std::string> cert = ReadPemFile(tls.cert_file, "--tls-cert");
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadPemFile(tls.key_file, "--tls-key");
  if (!key.ok()) return key.status();
  o.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.client_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPemFile(tls.client_ca_file, "--tls-client-ca");
    if (!ca.ok()) return ca.status();
    o.pem_root_certs = *std::move(ca);
    o.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(o);
}

std::string ConnectionHint(const grpc::Status& status, bool client_uses_tls) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return "";
  const std::string& m = status.error_message();
  if (client_uses_tls) {
    if (absl::StrContains(m, "CERTIFICATE_VERIFY_FAILED") || absl::StrContains(m, "certificate")) {
      return " (TLS: the coordinator's certificate is not signed by --tls-ca, or does not name "
             "this host; see docs/security.md)";
    }
    if (absl::StrContains(m, "Handshake") || absl::StrContains(m, "handshake") ||
        absl::StrContains(m, "SSL")) {
      return " (TLS handshake failed: is the coordinator serving TLS, and does it require a "
             "client certificate (--tls-cert/--tls-key)?)";
    }
    return "";
  }
  return " (if the coordinator serves TLS, pass --tls-ca or set $HILNAS_TLS_CA)";
}

}  // namespace hilnas
