#include "tools/campaign_db.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "util/clock.h"
#include "util/status_macros.h"

namespace hilnas::tools {

absl::StatusOr<std::unique_ptr<CampaignStore>> OpenCampaignDb(const std::string& db, const Clock* clock) {
  if (!std::filesystem::exists(db)) {
    return absl::NotFoundError(
        absl::StrCat("database ", db, " does not exist; give the coordinator's --db FILE"));
  }
  return CampaignStore::Open(db, clock);
}

absl::StatusOr<LoadedCampaign> LoadCampaignFromDb(const std::string& db, const std::string& name) {
  SystemClock clock;
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<CampaignStore> store, OpenCampaignDb(db, &clock));
  LoadedCampaign c;
  HILNAS_ASSIGN_OR_RETURN(c.record, store->Get(name));
  HILNAS_ASSIGN_OR_RETURN(c.trials, store->Trials(name));
  return c;
}

absl::StatusOr<std::vector<LatencyRow>> CampaignLatencyRows(const LoadedCampaign& c) {
  std::vector<LatencyRow> rows;
  for (const Trial& t : c.trials) {
    if (t.state() == FAILED || !t.has_latency() || t.measured_ttft_ms() <= 0) continue;
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchFromProto(t.arch()));
    for (LatencyRow& r : LatencyRowsOf(arch, t.latency(), "campaign")) rows.push_back(std::move(r));
  }
  if (rows.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("campaign \"", c.record.config.name(), "\" has no latency measurements yet"));
  }
  return rows;
}

}  // namespace hilnas::tools
