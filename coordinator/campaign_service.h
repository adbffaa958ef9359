// The campaign methods of the user-facing service: create (validated
// configuration), start, stop, resume, get, list. Translates between the
// CampaignStore / CampaignRunner and CampaignStatus; the gRPC layer only
// forwards (benchmark_service.h).
#ifndef HILNAS_COORDINATOR_CAMPAIGN_SERVICE_H_
#define HILNAS_COORDINATOR_CAMPAIGN_SERVICE_H_

#include <map>

#include "coordinator/benchmark_service.h"
#include "coordinator/campaign_runner.h"
#include "coordinator/campaign_store.h"

namespace hilnas {

// CampaignStatus of a campaign: progress counts, diagnostics, reference,
// front size and hypervolume, the newest `log_lines` progress lines.
absl::StatusOr<CampaignStatus> DescribeCampaign(CampaignStore& store, const std::string& name,
                                                int log_lines = 12);

// What a coordinator lets a campaign config from the network ask for
// (DESIGN.md, Security): it names an evaluator, never carries a command.
struct CampaignPolicy {
  // Evaluators defined on the coordinator's command line (--evaluator
  // NAME=TEMPLATE), by name; "in-process" is always there.
  std::map<std::string, std::string> evaluators;
  // backbone_checkpoint, backbone_metrics and tokens must lie under these.
  DataRoots data_roots;
  int max_campaigns = 100;  // Create: RESOURCE_EXHAUSTED past this many stored
};

class CampaignServiceImpl : public CampaignApi {
 public:
  // Not owned; both must outlive this object.
  CampaignServiceImpl(CampaignStore* store, CampaignRunner* runner, CampaignPolicy policy = {})
      : store_(store), runner_(runner), policy_(std::move(policy)) {}

  // Applies the defaults and validates (INVALID_ARGUMENT naming the field:
  // an evaluator this coordinator does not define, a path outside its data
  // roots); ALREADY_EXISTS for a name in use; RESOURCE_EXHAUSTED past
  // max_campaigns.
  absl::StatusOr<CampaignStatus> Create(const CampaignConfig& config) override;
  // created -> running.
  absl::StatusOr<CampaignStatus> Start(const std::string& name) override;
  absl::StatusOr<CampaignStatus> Get(const std::string& name) override;
  absl::StatusOr<std::vector<CampaignStatus>> List() override;
  // running -> stopped; the trial under way finishes first.
  absl::StatusOr<CampaignStatus> Stop(const std::string& name) override;
  // stopped or failed -> running; failures so far no longer count against
  // max_failed_fraction.
  absl::StatusOr<CampaignStatus> Resume(const std::string& name) override;

 private:
  CampaignStore* store_;    // not owned
  CampaignRunner* runner_;  // not owned
  const CampaignPolicy policy_;
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_CAMPAIGN_SERVICE_H_
