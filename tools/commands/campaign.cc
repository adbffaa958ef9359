// `hilnas campaign create|start|status|stop|resume|list`: search campaigns
// through the coordinator (gRPC).
#include "tools/commands/campaign.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/campaign_config.h"
#include "coordinator/campaign_store.h"
#include "tools/commands/commands.h"

namespace hilnas::tools {
namespace {

struct CampaignOptions {
  std::string verb;  // create | start | status | stop | resume | list
  std::string name;
  std::string config;
  bool wait = false;
  ClientFlags client;
};

void PrintStatus(const CampaignStatus& s) {
  const CampaignConfig& c = s.config();
  std::printf("campaign %s: %s, stage %d%s%s\n", s.name().c_str(), s.state().c_str(), s.stage(),
              s.message().empty() ? "" : ": ", s.message().c_str());
  std::printf("  stage 1: %d of %d latency points, CV R^2 %s, Kendall tau %s\n", s.latency_points(),
              c.stage1_latency_points(),
              s.cv_r2() != 0 ? absl::StrFormat("%.3f", s.cv_r2()).c_str() : "-",
              s.cv_tau() != 0 ? absl::StrFormat("%.3f", s.cv_tau()).c_str() : "-");
  std::printf("  stage 2: %d of %d trials (%d done, %d failed), front %d, hypervolume %.4g\n",
              s.trials_total(), c.stage2_trials(), s.trials_done(), s.trials_failed(),
              s.front_size(), s.hypervolume());
  for (const std::string& e : s.in_flight()) std::printf("  evaluating: %s\n", e.c_str());
  for (const std::string& l : s.log()) std::printf("  | %s\n", l.c_str());
}

using Call = grpc::Status (UserService::Stub::*)(grpc::ClientContext*, const CampaignRequest&,
                                                 CampaignStatus*);

absl::StatusOr<CampaignStatus> CallCampaign(const ClientFlags& cl, Call call,
                                            const std::string& name) {
  absl::StatusOr<std::unique_ptr<UserService::Stub>> stub = UserStub(cl);
  if (!stub.ok()) return stub.status();
  CampaignRequest req;
  req.set_name(name);
  CampaignStatus status;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(30'000));
  grpc::Status s = ((**stub).*call)(&ctx, req, &status);
  if (!s.ok()) {
    return CoordinatorError(s, cl);
  }
  return status;
}

// Prints new log lines until the campaign is done, failed or stopped.
// Exit code 0 only for "done".
}  // namespace

int FollowCampaign(const ClientFlags& cl, const std::string& name) {
  std::vector<std::string> shown;
  while (true) {
    absl::StatusOr<CampaignStatus> s = CallCampaign(cl, &UserService::Stub::GetCampaign, name);
    if (!s.ok() && s.status().code() != absl::StatusCode::kUnavailable &&
        s.status().code() != absl::StatusCode::kDeadlineExceeded) {
      return Fail(s.status());  // retrying cannot help
    }
    if (!s.ok()) {
      std::fprintf(stderr, "%s; retrying\n", std::string(s.status().message()).c_str());
      std::this_thread::sleep_for(std::chrono::seconds(2));
      continue;
    }
    // The log holds the newest lines; print those not printed yet.
    size_t overlap = 0;
    for (size_t k = std::min(shown.size(), static_cast<size_t>(s->log_size())); k > 0; --k) {
      if (std::equal(shown.end() - k, shown.end(), s->log().begin())) {
        overlap = k;
        break;
      }
    }
    for (int i = static_cast<int>(overlap); i < s->log_size(); ++i) {
      std::printf("[%s] %s\n", name.c_str(), s->log(i).c_str());
      shown.push_back(s->log(i));
    }
    std::fflush(stdout);
    absl::StatusOr<CampaignState> state = ParseCampaignState(s->state());
    if (!state.ok()) return Fail(state.status());
    if (CampaignAtRest(*state)) {
      std::printf("campaign %s %s: %s\n", name.c_str(), s->state().c_str(), s->message().c_str());
      return *state == CampaignState::kDone ? 0 : 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  }
}

int StartCampaign(const ClientFlags& client, const std::string& name, bool wait) {
  absl::StatusOr<CampaignStatus> s = CallCampaign(client, &UserService::Stub::StartCampaign, name);
  if (!s.ok()) return Fail(s.status());
  PrintStatus(*s);
  return wait ? FollowCampaign(client, name) : 0;
}

namespace {

int Create(const CampaignOptions& o) {
  const ClientFlags& cl = o.client;
  const std::string path = o.config;
  if (path.empty()) return Fail(absl::InvalidArgumentError("campaign create needs --config FILE"));
  absl::StatusOr<CampaignConfig> config = ReadCampaignConfig(path);
  if (!config.ok()) return Fail(config.status());
  absl::StatusOr<std::unique_ptr<UserService::Stub>> stub = UserStub(cl);
  if (!stub.ok()) return Fail(stub.status());
  CreateCampaignRequest req;
  *req.mutable_config() = *config;
  CampaignStatus status;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(60'000));
  grpc::Status s = (*stub)->CreateCampaign(&ctx, req, &status);
  if (!s.ok()) {
    return Fail(CoordinatorError(s, cl));
  }
  PrintStatus(status);
  return 0;
}

int List(const ClientFlags& cl) {
  absl::StatusOr<std::unique_ptr<UserService::Stub>> stub = UserStub(cl);
  if (!stub.ok()) return Fail(stub.status());
  ListCampaignsResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(30'000));
  grpc::Status s = (*stub)->ListCampaigns(&ctx, CampaignRequest(), &resp);
  if (!s.ok()) {
    return Fail(CoordinatorError(s, cl));
  }
  std::printf("%-20s %-8s %-5s %-10s %-12s %-8s %s\n", "NAME", "STATE", "STAGE", "LATENCY",
              "TRIALS", "FRONT", "HYPERVOLUME");
  for (const CampaignStatus& c : resp.campaigns()) {
    std::printf(
        "%-20s %-8s %-5d %-10d %-12s %-8d %.4g\n", c.name().c_str(), c.state().c_str(), c.stage(),
        c.latency_points(),
        absl::StrCat(c.trials_done(), "/", c.trials_total(), " (", c.trials_failed(), " failed)")
            .c_str(),
        c.front_size(), c.hypervolume());
  }
  std::printf("%d campaigns\n", resp.campaigns_size());
  return 0;
}

}  // namespace

namespace {

int RunCampaign(const CampaignOptions& o) {
  const std::string& sub = o.verb;
  if (sub == "create" && o.name.empty()) return Create(o);
  if (sub == "list" && o.name.empty()) return List(o.client);
  const Call call = sub == "start"    ? &UserService::Stub::StartCampaign
                    : sub == "status" ? &UserService::Stub::GetCampaign
                    : sub == "stop"   ? &UserService::Stub::StopCampaign
                    : sub == "resume" ? &UserService::Stub::ResumeCampaign
                                      : nullptr;
  if (call == nullptr || o.name.empty()) {
    return Fail(absl::InvalidArgumentError(
        "usage: hilnas campaign create --config FILE | start NAME [--wait] | status NAME | "
        "stop NAME | resume NAME [--wait] | list"));
  }
  absl::StatusOr<CampaignStatus> s = CallCampaign(o.client, call, o.name);
  if (!s.ok()) return Fail(s.status());
  PrintStatus(*s);
  if ((sub == "start" || sub == "resume") && o.wait) return FollowCampaign(o.client, o.name);
  return 0;
}

}  // namespace

void AddCampaignCommand(Cli& cli) {
  auto [app, o] = cli.Add<CampaignOptions>(
      "campaign",
      "create --config FILE | start NAME [--wait] | status|stop|resume NAME | list",
      "store a search campaign (.textproto); run it: stage 1 latency, stage 2 qNEHVI;\n"
      "progress, diagnostics, log; stop and resume",
      RunCampaign);
  app->add_option("verb", o->verb, "create | start | status | stop | resume | list")
      ->required()
      ->check(CLI::IsMember({"create", "start", "status", "stop", "resume", "list"}));
  app->add_option("name", o->name, "the campaign (start, status, stop, resume)");
  app->add_option("--config", o->config, "create: the campaign .textproto");
  app->add_flag("--wait", o->wait, "start/resume: follow progress until the campaign ends");
  AddClientFlags(app, &o->client, ClientRole::kUser);
}

}  // namespace hilnas::tools
