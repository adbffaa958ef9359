// `hilnas campaign | pareto | export | demo`: search campaigns through the
// coordinator (gRPC), their fronts and checkpoints read straight from its
// SQLite file (so they work after it has stopped), and the README's demo.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "coordinator/audit_log.h"
#include "coordinator/campaign_config.h"
#include "coordinator/campaign_report.h"
#include "coordinator/campaign_store.h"
#include "latency_model/dataset.h"
#include "latency_model/latency_model.h"
#include "model/gguf.h"
#include "model/gguf_export.h"
#include "nlohmann/json.hpp"
#include "pruner/backbone.h"
#include "search_space/counts.h"
#include "search_space/shapes.h"
#include "tools/campaign_db.h"
#include "tools/commands.h"
#include "tools/coordinator_client.h"
#include "tools/flags.h"
#include "util/clock.h"
#include "util/files.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {

namespace fs = std::filesystem;

std::chrono::system_clock::time_point In(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

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

absl::StatusOr<CampaignStatus> CallCampaign(const CommandLine& cl, Call call,
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
int Follow(const CommandLine& cl, const std::string& name) {
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

int Create(const CommandLine& cl) {
  const std::string path = cl.config;
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

int List(const CommandLine& cl) {
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

int CampaignCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  const std::string sub = args.empty() ? "" : args[0];
  if (sub == "create") return Create(cl);
  if (sub == "list") return List(cl);
  const Call call = sub == "start"    ? &UserService::Stub::StartCampaign
                    : sub == "status" ? &UserService::Stub::GetCampaign
                    : sub == "stop"   ? &UserService::Stub::StopCampaign
                    : sub == "resume" ? &UserService::Stub::ResumeCampaign
                                      : nullptr;
  if (call == nullptr || args.size() != 2) {
    return Fail(absl::InvalidArgumentError(
        "usage: hilnas campaign create --config FILE | start NAME [--wait] | status NAME | "
        "stop NAME | resume NAME [--wait] | list"));
  }
  absl::StatusOr<CampaignStatus> s = CallCampaign(cl, call, args[1]);
  if (!s.ok()) return Fail(s.status());
  PrintStatus(*s);
  if ((sub == "start" || sub == "resume") && cl.wait) return Follow(cl, args[1]);
  return 0;
}

namespace {

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

}  // namespace

int ParetoCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (args.size() != 2 || (args[0] != "show" && args[0] != "export" && args[0] != "plot")) {
    return Fail(absl::InvalidArgumentError(
        "usage: hilnas pareto show|export|plot CAMPAIGN [--db FILE --format csv|json --out FILE "
        "--all]"));
  }
  absl::StatusOr<LoadedCampaign> c = LoadCampaignFromDb(cl.db, args[1]);
  if (!c.ok()) return Fail(c.status());
  const std::string out = cl.out;
  if (args[0] == "show") {
    std::printf("campaign %s: %s, stage %d; %s\n\n", args[1].c_str(),
                std::string(CampaignStateName(c->record.state)).c_str(), c->record.stage,
                FrontSummary(c->record, c->trials).c_str());
    std::printf("%s", ParetoTable(c->record, c->trials, cl.all).c_str());
    return 0;
  }
  if (args[0] == "export") {
    const std::string format = cl.format;
    if (format != "csv" && format != "json") {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--format ", format, " is not one of csv, json")));
    }
    const std::string text =
        format == "csv" ? ParetoCsv(c->record, c->trials) : ParetoJson(c->record, c->trials);
    absl::Status s = WriteOrPrint(out, text);
    return s.ok() ? 0 : Fail(s);
  }
  if (out.empty()) return Fail(absl::InvalidArgumentError("pareto plot needs --out FILE.svg"));
  absl::Status s = WriteOrPrint(out, ParetoSvg(c->record, c->trials, PublishedMarkers(*c)));
  return s.ok() ? 0 : Fail(s);
}

namespace {

// The trial of a campaign, or NOT_FOUND naming what exists.
absl::StatusOr<const Trial*> FindTrial(const LoadedCampaign& c, const std::string& name,
                                       int64_t id) {
  for (const Trial& t : c.trials) {
    if (t.id() == id) return &t;
  }
  return absl::NotFoundError(
      absl::StrCat("campaign \"", name, "\" has no trial ", id, " (it has ", c.trials.size(), ")"));
}

// Prunes the campaign's backbone to the trial's architecture into `dir`.
absl::Status PruneTrial(const LoadedCampaign& c, const Trial& trial, const std::string& dir,
                        StorageDtype dtype) {
  const CampaignConfig& cfg = c.record.config;
  HILNAS_ASSIGN_OR_RETURN(Backbone backbone,
                          LoadBackbone(cfg.backbone_checkpoint(), cfg.backbone_metrics()));
  HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchFromProto(trial.arch()));
  PruneOptions po;
  po.block_size = cfg.search_space().block_size();
  return PruneToCheckpoint(backbone, arch, po, dir, dtype);
}

// hilnas export --format gguf (--ckpt DIR | --campaign C --trial N) --out FILE
int ExportGgufCommand(const CommandLine& cl) {
  const std::string out = cl.out;
  if (out.empty() || (cl.ckpt.empty() == cl.campaign.empty())) {
    return Fail(absl::InvalidArgumentError(
        "usage: hilnas export --format gguf (--ckpt DIR | --campaign C --trial N) --out FILE "
        "[--dtype f32|f16 --overwrite]"));
  }
  GgufExportOptions o;
  if (cl.dtype == "f16" || cl.dtype == "F16") {
    o.dtype = GgmlType::kF16;
  } else if (cl.dtype != "f32" && cl.dtype != "F32") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--dtype ", cl.dtype, ": GGUF export writes f32 or f16")));
  }
  std::error_code ec;
  if (std::filesystem::exists(out, ec) && !cl.overwrite) {
    return Fail(
        absl::AlreadyExistsError(absl::StrCat("--out ", out, " exists; --overwrite replaces it")));
  }
  if (std::filesystem::is_directory(out, ec)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--out ", out, " is a directory")));
  }
  absl::Status s = [&]() -> absl::Status {
    if (!cl.ckpt.empty()) return ExportGguf(cl.ckpt, out, o);
    HILNAS_ASSIGN_OR_RETURN(LoadedCampaign c, LoadCampaignFromDb(cl.db, cl.campaign));
    HILNAS_ASSIGN_OR_RETURN(const Trial* trial, FindTrial(c, cl.campaign, cl.trial));
    // The dense checkpoint first (f32: the GGUF file rounds once, to its own dtype).
    const std::string staging = out + ".ckpt.tmp";
    std::filesystem::remove_all(staging, ec);
    absl::Status pruned = PruneTrial(c, *trial, staging, StorageDtype::kF32);
    absl::Status exported = pruned.ok() ? ExportGguf(staging, out, o) : pruned;
    std::filesystem::remove_all(staging, ec);
    return exported;
  }();
  if (!s.ok()) return Fail(s);
  absl::StatusOr<GgufFile> f = ReadGguf(out);
  if (!f.ok()) return Fail(f.status());
  std::printf("%s: GGUF v%u, %s layout, %s, %zu tensors, %s bytes\n", out.c_str(), f->version,
              f->Find("general.architecture")->s.c_str(), GgmlTypeName(o.dtype), f->tensors.size(),
              WithCommas(std::filesystem::file_size(out)).c_str());
  return 0;
}

}  // namespace

int ExportCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("export takes flags only"));
  if (cl.format == "gguf") return ExportGgufCommand(cl);
  const std::string name = cl.campaign, out = cl.out;
  const int64_t id = cl.trial;
  if (name.empty() || out.empty() || id <= 0) {
    return Fail(absl::InvalidArgumentError(
        "usage: hilnas export --campaign C --trial N --out DIR [--db FILE --dtype f32|bf16]\n"
        "       hilnas export --format gguf (--ckpt DIR | --campaign C --trial N) --out FILE"));
  }
  absl::StatusOr<LoadedCampaign> c = LoadCampaignFromDb(cl.db, name);
  if (!c.ok()) return Fail(c.status());
  absl::StatusOr<const Trial*> found = FindTrial(*c, name, id);
  if (!found.ok()) return Fail(found.status());
  const Trial* trial = *found;
  absl::Status s = [&]() -> absl::Status {
    const CampaignConfig& cfg = c->record.config;
    HILNAS_ASSIGN_OR_RETURN(
        OutputFolder dest,
        OutputFolder::Prepare(out, cl.overwrite,
                              {cfg.backbone_checkpoint(), cfg.backbone_metrics(), cl.db}));
    HILNAS_ASSIGN_OR_RETURN(StorageDtype dtype, StorageDtypeOf(cl));
    HILNAS_RETURN_IF_ERROR(PruneTrial(*c, *trial, dest.staging(), dtype));
    return dest.Commit();
  }();
  if (!s.ok()) return Fail(s);
  std::printf(
      "trial %lld of %s (%s, %s parameters, loss %.4f after the search's training) "
      "pruned from %s -> %s\n",
      static_cast<long long>(id), name.c_str(), ArchSummary(trial->arch()).c_str(),
      WithCommas(trial->parameters()).c_str(), trial->loss(),
      c->record.config.backbone_checkpoint().c_str(), out.c_str());
  return 0;
}

int AuditCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("audit takes flags only"));
  if (absl::Status s = CheckRegularFile(cl.db); !s.ok()) return Fail(s);
  SystemClock clock;
  absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(cl.db, &clock);
  if (!log.ok()) return Fail(log.status());
  const int n = cl.n > 0 ? std::min(cl.n, 100'000) : 50;
  absl::StatusOr<std::vector<AuditEntry>> entries = (*log)->Newest(n);
  if (!entries.ok()) return Fail(entries.status());
  if (cl.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const AuditEntry& e : *entries) {
      j.push_back({{"time_unix_ms", e.time_ms},
                   {"credential", e.credential},
                   {"action", e.action},
                   {"target", e.target},
                   {"outcome", e.outcome}});
    }
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%-23s %-12s %-7s %-24s %s\n", "TIME (UTC)", "CREDENTIAL", "ACTION", "TARGET",
              "OUTCOME");
  for (const AuditEntry& e : *entries) {
    std::printf("%-23s %-12s %-7s %-24s %s\n",
                absl::FormatTime("%Y-%m-%d %H:%M:%E3S", absl::FromUnixMillis(e.time_ms),
                                 absl::UTCTimeZone())
                    .c_str(),
                e.credential.c_str(), e.action.c_str(), e.target.c_str(), e.outcome.c_str());
  }
  std::printf("%zu entries\n", entries->size());
  return 0;
}

}  // namespace hilnas::tools
