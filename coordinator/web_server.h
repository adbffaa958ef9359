// The coordinator's web page (Boost.Beast over HTTP or HTTPS, no internet
// needed): campaign progress, the live Pareto chart, the trial table, the
// progress log and the agents, refreshed every two seconds from a small
// read-only JSON API:
//   GET /                                 the page
//   GET /api/campaigns                    every campaign's status
//   GET /api/campaigns/NAME               status, front and every trial
//   GET /api/campaigns/NAME/front.svg     the Pareto chart
//   GET /api/agents                       registered agents
//   GET|POST /login                       the login form (user tokens set)
// With user tokens, every route but /login answers 401 unless the request
// carries "Authorization: Bearer TOKEN" or the cookie the login form sets
// (random, HttpOnly, SameSite=Strict, Secure over HTTPS; 12 h).
// One thread serves every connection asynchronously; each connection has
// one deadline for the whole exchange (10 s), so a stalled or trickling
// client is dropped and blocks no one else; at most 256 are open at once.
#ifndef HILNAS_COORDINATOR_WEB_SERVER_H_
#define HILNAS_COORDINATOR_WEB_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/benchmark_service.h"
#include "coordinator/campaign_store.h"
#include "coordinator/job_store.h"
#include "util/clock.h"

namespace hilnas {

struct WebServerOptions {
  std::string address;        // "127.0.0.1:8080"; port 0 picks one
  std::string tls_cert_file;  // with tls_key_file: HTTPS
  std::string tls_key_file;
  std::vector<UserToken> user_tokens;  // non-empty: every page needs one
  const Clock* clock = nullptr;        // login cookie expiry; null: the system clock
  // One deadline for the whole exchange (TLS handshake, request, answer):
  // a client that trickles bytes is dropped when it passes.
  int64_t request_deadline_ms = 10'000;
  int max_connections = 256;  // more are closed as soon as they are accepted
};

class WebServer {
 public:
  // Listens as `options` say. The stores are not owned and must outlive
  // the server.
  static absl::StatusOr<std::unique_ptr<WebServer>> Start(const WebServerOptions& options,
                                                          CampaignStore* campaigns, JobStore* jobs);
  // Plain HTTP on `address`, no tokens.
  static absl::StatusOr<std::unique_ptr<WebServer>> Start(const std::string& address,
                                                          CampaignStore* campaigns, JobStore* jobs);
  ~WebServer();  // stops serving; open connections are dropped
  int port() const;
  bool tls() const;

  // The response body and content type for a GET of `target` (exposed for
  // tests); NOT_FOUND for an unknown path or campaign.
  struct Response {
    std::string content_type;
    std::string body;
  };
  static absl::StatusOr<Response> Handle(const std::string& target, CampaignStore& campaigns,
                                         JobStore& jobs);

 public:
  struct Impl;  // public only for the .cc's connection sessions

 private:
  explicit WebServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_WEB_SERVER_H_
