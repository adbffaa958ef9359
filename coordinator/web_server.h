// The coordinator's web page (Boost.Beast over plain HTTP, no internet
// needed): campaign progress, the live Pareto chart, the trial table, the
// progress log and the agents, refreshed every two seconds from a small
// JSON API:
//   GET /                                 the page
//   GET /api/campaigns                    every campaign's status
//   GET /api/campaigns/NAME               status, front and every trial
//   GET /api/campaigns/NAME/front.svg     the Pareto chart
//   GET /api/agents                       registered agents
// One thread accepts; each connection is served on its own short-lived
// thread with a read deadline, so a stalled client blocks no one else.
#ifndef HILNAS_COORDINATOR_WEB_SERVER_H_
#define HILNAS_COORDINATOR_WEB_SERVER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/campaign_store.h"
#include "coordinator/job_store.h"

namespace hilnas {

class WebServer {
 public:
  // Listens on `address` ("127.0.0.1:8080"; port 0 picks one). The stores
  // are not owned and must outlive the server.
  static absl::StatusOr<std::unique_ptr<WebServer>> Start(const std::string& address,
                                                          CampaignStore* campaigns, JobStore* jobs);
  ~WebServer();  // stops accepting and waits for open connections
  int port() const;

  // The response body and content type for a GET of `target` (exposed for
  // tests); NOT_FOUND for an unknown path or campaign.
  struct Response {
    std::string content_type;
    std::string body;
  };
  static absl::StatusOr<Response> Handle(const std::string& target, CampaignStore& campaigns,
                                         JobStore& jobs);

 private:
  struct Impl;
  explicit WebServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_WEB_SERVER_H_
