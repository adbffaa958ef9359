// Reading a campaign straight from a coordinator's SQLite file, for the
// commands that work without a running coordinator (`pareto`, `export`,
// `latency fit|eval --campaign`). Implemented in campaign_db.cc.
#ifndef HILNAS_TOOLS_CAMPAIGN_DB_H_
#define HILNAS_TOOLS_CAMPAIGN_DB_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/campaign_store.h"
#include "latency_model/dataset.h"

namespace hilnas::tools {

struct LoadedCampaign {
  CampaignRecord record;
  std::vector<Trial> trials;
};

// The coordinator's SQLite file, to read or update; NOT_FOUND naming the
// file when it does not exist (it is never created here).
absl::StatusOr<std::unique_ptr<CampaignStore>> OpenCampaignDb(const std::string& db, const Clock* clock);

// NOT_FOUND naming the file when it does not exist or the campaign is not
// in it.
absl::StatusOr<LoadedCampaign> LoadCampaignFromDb(const std::string& db, const std::string& name);

// Every measured trial's latency rows (all prompt lengths), device class
// "campaign".
absl::StatusOr<std::vector<LatencyRow>> CampaignLatencyRows(const LoadedCampaign& c);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_CAMPAIGN_DB_H_
