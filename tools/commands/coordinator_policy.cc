// The coordinator's policy from its flags: credentials, tokens,
// evaluators, data roots, exposure and the drift canary.
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coordinator/evaluators.h"
#include "proto/benchmark_request.h"
#include "tools/commands/coordinator.h"
#include "tools/coordinator_client.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {

// Whether HOST:PORT (or [HOST]:PORT, or unix:PATH) can be reached only from
// this machine.
bool IsLoopback(const std::string& address) {
  if (absl::StartsWith(address, "unix:")) return true;
  std::string host = address.substr(0, address.rfind(':'));
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// --user-token (or $HILNAS_USER_TOKEN), named "user", and every
// "NAME TOKEN" line of --user-tokens-file.
absl::StatusOr<std::vector<UserToken>> UserTokensOf(const CoordinatorOptions& cl) {
  std::vector<UserToken> tokens;
  if (const std::string t = UserTokenOf(cl.user_token); !t.empty()) tokens.push_back({"user", t});
  if (const std::string f = cl.user_tokens_file; !f.empty()) {
    std::ifstream in(f);
    if (!in)
      return absl::InvalidArgumentError(absl::StrCat("--user-tokens-file ", f, ": cannot read"));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      line = std::string(absl::StripAsciiWhitespace(line));
      if (line.empty() || line[0] == '#') continue;
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      if (parts.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("--user-tokens-file ", f, ":", n, ": expected \"NAME TOKEN\""));
      }
      tokens.push_back({parts[0], parts[1]});
    }
  }
  for (const UserToken& t : tokens) {
    if (t.token.size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("user token \"", t.name, "\" has ", t.token.size(),
                       " characters; use at least 16 (e.g. `openssl rand -hex 32`)"));
    }
  }
  return tokens;
}

// --canary_request: the drift check's reference benchmark, validated like
// a submission and bounded so re-timing it stays cheap.
absl::StatusOr<BenchmarkRequest> CanaryOf(const CoordinatorOptions& cl) {
  if (cl.canary_request == "none") return BenchmarkRequest();
  if (!(cl.canary_tolerance > 0 && cl.canary_tolerance < 10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--canary_tolerance ", cl.canary_tolerance, " is not in (0, 10)"));
  }
  if (cl.max_drift_requeues < 0 || cl.max_drift_requeues > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_drift_requeues ", cl.max_drift_requeues, " is not in 0..100"));
  }
  if (cl.canary_request == "default") return DefaultCanary();
  BenchmarkRequest r;
  if (absl::Status s = ReadTextProtoFile(cl.canary_request, &r); !s.ok()) return s;
  if (r.model_case() != BenchmarkRequest::kArch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--canary_request ", cl.canary_request, ": the canary must name an arch (random weights)"));
  }
  if (absl::Status s = ValidateBenchmarkRequest(r); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--canary_request ", cl.canary_request, ": ", s.message()));
  }
  return r;
}

// --evaluator NAME=TEMPLATE or NAME=slurm:FILE, each checked: a name a
// config can carry, a template with {checkpoint} and {output} or a Slurm
// configuration that reads.
absl::StatusOr<std::map<std::string, std::string>> EvaluatorsOf(const CoordinatorOptions& cl) {
  std::map<std::string, std::string> out;
  for (const std::string& e : cl.evaluators) {
    const size_t eq = e.find('=');
    const std::string name = e.substr(0, eq);
    if (eq == std::string::npos || name.empty() || name == "in-process" ||
        name.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
            std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--evaluator ", e, ": expected NAME=TEMPLATE with NAME of letters, digits, - _ ."));
    }
    const std::string definition = e.substr(eq + 1);
    if (absl::Status s = CheckEvaluatorDefinition(name, definition); !s.ok()) return s;
    out[name] = definition;
  }
  return out;
}

// A coordinator reachable from other machines must have TLS, both tokens
// and data roots, unless the operator says --insecure.
absl::Status CheckExposure(const CoordinatorOptions& cl, bool tls, bool enrollment, bool users) {
  const bool exposed = !IsLoopback(cl.listen) || (!cl.http.empty() && !IsLoopback(cl.http));
  if (!exposed || cl.insecure) return absl::OkStatus();
  std::vector<std::string> missing;
  if (!tls) missing.push_back("--tls-cert/--tls-key (TLS)");
  if (!enrollment) missing.push_back("--token (agents' enrollment token)");
  if (!users) missing.push_back("--user-token (users' token)");
  if (cl.data_roots.empty()) missing.push_back("--data-root (where received paths may point)");
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to listen on ", cl.listen, cl.http.empty() ? "" : absl::StrCat(" / ", cl.http),
      ", which other machines can reach, without ", absl::StrJoin(missing, ", "),
      ": anyone who reaches it could queue jobs, forge results or read files. Give them (see "
      "docs/security.md), listen on 127.0.0.1, or pass --insecure to accept the risk"));
}

}  // namespace


absl::StatusOr<Policy> PolicyOf(const CoordinatorOptions& cl) {
  Policy p{ServerTls{cl.tls_cert, cl.tls_key, cl.tls_client_ca}, nullptr, {}, {}, {}, "", {}};
  HILNAS_ASSIGN_OR_RETURN(p.credentials, MakeServerCredentials(p.tls));
  HILNAS_ASSIGN_OR_RETURN(p.user_tokens, UserTokensOf(cl));
  HILNAS_ASSIGN_OR_RETURN(p.evaluators, EvaluatorsOf(cl));
  HILNAS_ASSIGN_OR_RETURN(p.roots, DataRoots::Make(cl.data_roots));
  ClientFlags token;
  token.token = cl.token;
  p.enrollment_token = EnrollmentToken(token);
  HILNAS_RETURN_IF_ERROR(CheckExposure(cl, !p.tls.cert_file.empty(), !p.enrollment_token.empty(),
                                       !p.user_tokens.empty()));
  HILNAS_ASSIGN_OR_RETURN(p.canary, CanaryOf(cl));
  return p;
}

}  // namespace hilnas::tools
