// `hilnas pareto show|export|plot`: a campaign's Pareto front, read straight
// from the coordinator's SQLite file (so it works after it has stopped).
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "coordinator/campaign_report.h"
#include "latency_model/latency_model.h"
#include "search_space/shapes.h"
#include "tools/campaign_db.h"
#include "tools/commands/commands.h"
#include "util/files.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {

struct ParetoOptions {
  std::string verb;  // show | export | plot
  std::string campaign;
  std::string db = "hilnas.db";
  bool all = false;
  std::string format = "csv";
  std::string out;
};

// Published shapes that are members of the campaign's space, at their
// predicted TTFT (a latency model fitted on the campaign's measurements).
std::vector<std::pair<std::string, double>> PublishedMarkers(const LoadedCampaign& c) {
  std::vector<std::pair<std::string, double>> out;
  absl::StatusOr<std::vector<Shape>> shapes = PublishedShapes();
  absl::StatusOr<Space> space = Space::FromProto(c.record.config.search_space());
  if (!shapes.ok() || !space.ok()) return out;
  std::vector<Arch> members;
  std::vector<std::string> names;
  for (const Shape& s : *shapes) {
    if (space->Contains(s.arch).ok()) members.push_back(s.arch), names.push_back(s.name);
  }
  if (members.empty()) return out;
  absl::StatusOr<std::vector<LatencyRow>> rows = CampaignLatencyRows(c);
  if (!rows.ok()) return out;
  absl::StatusOr<LatencyModel> m = LatencyModel::Fit(*space, "campaign", LatencyMetric::kTtft,
                                                     c.record.config.ttft_prompt_tokens(), *rows);
  if (!m.ok()) return out;
  absl::StatusOr<std::vector<LatencyPrediction>> p = m->Predict(members);
  if (!p.ok()) return out;
  for (size_t i = 0; i < members.size(); ++i) out.push_back({names[i], (*p)[i].median_ms});
  return out;
}

absl::Status WriteOrPrint(const std::string& out, const std::string& text) {
  if (out.empty()) {
    std::fputs(text.c_str(), stdout);
    return absl::OkStatus();
  }
  HILNAS_RETURN_IF_ERROR(WriteFileAtomically(out, text));
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return absl::OkStatus();
}

int RunPareto(const ParetoOptions& cl) {
  absl::StatusOr<LoadedCampaign> c = LoadCampaignFromDb(cl.db, cl.campaign);
  if (!c.ok()) return Fail(c.status());
  const std::string out = cl.out;
  if (cl.verb == "show") {
    std::printf("campaign %s: %s, stage %d; %s\n%s\n\n", cl.campaign.c_str(),
                std::string(CampaignStateName(c->record.state)).c_str(), c->record.stage,
                FrontSummary(c->record, c->trials).c_str(),
                DeploymentSummary(c->record.config).c_str());
    std::printf("%s", ParetoTable(c->record, c->trials, cl.all).c_str());
    return 0;
  }
  if (cl.verb == "export") {
    const std::string format = cl.format;
    const std::string text =
        format == "csv" ? ParetoCsv(c->record, c->trials) : ParetoJson(c->record, c->trials);
    absl::Status s = WriteOrPrint(out, text);
    return s.ok() ? 0 : Fail(s);
  }
  if (out.empty()) return Fail(absl::InvalidArgumentError("pareto plot needs --out FILE.svg"));
  absl::Status s = WriteOrPrint(out, ParetoSvg(c->record, c->trials, PublishedMarkers(*c)));
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

void AddParetoCommand(Cli& cli) {
  auto [app, o] = cli.Add<ParetoOptions>(
      "pareto",
      "show CAMPAIGN [--db FILE --all] | export CAMPAIGN --format csv|json [--out FILE]\n"
      "  | plot CAMPAIGN --out front.svg",
      "the Pareto table (loss vs predicted TTFT, decode, memory); every trial, the front,\n"
      "the reference point and published shapes as a plot",
      RunPareto);
  app->add_option("verb", o->verb, "show | export | plot")
      ->required()
      ->check(CLI::IsMember({"show", "export", "plot"}));
  app->add_option("campaign", o->campaign, "the campaign")->required();
  app->add_option("--db", o->db, "the coordinator's SQLite file");
  app->add_flag("--all", o->all, "show: every trial of both stages, not only the evaluated ones");
  app->add_option("--format", o->format, "export: csv | json")
      ->check(CLI::IsMember({"csv", "json"}));
  app->add_option("--out", o->out, "export: write here instead of stdout; plot: the SVG");
}

}  // namespace hilnas::tools
