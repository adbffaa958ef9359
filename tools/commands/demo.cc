// `hilnas demo`, the README's main job: a scaled-down two-stage campaign
// (MobileLLM-Flash Sec. 3.4) end to end on this machine. It builds the demo
// corpus, starts a coordinator (SQLite, web page) and a fleet of 2 local
// agents as child processes, creates and starts the campaign in
// configs/demo-campaign.textproto on the committed demo backbone, follows
// its progress, and ends with the Pareto table, front.svg and front.csv.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/campaign_config.h"
#include "coordinator/campaign_report.h"
#include "tools/campaign_db.h"
#include "tools/commands/campaign.h"
#include "tools/commands/commands.h"
#include "tools/commands/corpus.h"
#include "tools/common.h"
#include "tools/coordinator_client.h"
#include "util/files.h"
#include "util/secrets.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {

namespace fs = std::filesystem;

// Reads the port a child wrote to `file`, waiting up to 60 s.
std::string WaitForPort(const std::string& file, pid_t child) {
  std::string port;
  for (int i = 0; i < 1200 && port.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::ifstream(file) >> port;
    if (waitpid(child, nullptr, WNOHANG) == child) break;
  }
  return port;
}

void StopChild(pid_t pid) {
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
}

struct DemoOptions {
  std::string out = "hilnas-demo";
  std::string config;  // default configs/demo-campaign.textproto
};

// A fresh demo folder (stale database and ports removed), the corpus, and
// the campaign config with the demo's paths filled in.
absl::StatusOr<CampaignConfig> PrepareDemo(const DemoOptions& o, const std::string& dir) {
  const std::string config_path =
      o.config.empty() ? std::string(HILNAS_SOURCE_DIR) + "/configs/demo-campaign.textproto"
                       : o.config;
  std::error_code ec;
  for (const char* stale : {"demo.db", "demo.db-wal", "demo.db-shm", "port", "http_port"}) {
    fs::remove(fs::path(dir) / stale, ec);
  }
  fs::remove_all(fs::path(dir) / "demo.db.work", ec);
  const std::string corpus = dir + "/corpus.bin";
  if (!fs::exists(corpus)) {
    std::printf("== demo corpus: byte-level English text from Debian's fortunes and licences\n");
    HILNAS_RETURN_IF_ERROR(RunCorpus(ByteCorpusOptions(corpus, "")));
  }
  CampaignConfig config;
  HILNAS_RETURN_IF_ERROR(ReadTextProtoFile(config_path, &config));
  if (config.tokens().empty()) config.set_tokens(corpus);
  if (fs::path(config.backbone_checkpoint()).is_relative()) {
    config.set_backbone_checkpoint(
        (fs::path(HILNAS_SOURCE_DIR) / config.backbone_checkpoint()).lexically_normal().string());
  }
  config = WithCampaignDefaults(std::move(config));
  HILNAS_RETURN_IF_ERROR(ValidateCampaignConfig(config, config_path));
  return config;
}

// Tokens made for this run, handed to the coordinator, the fleet and this
// process's own client through the environment: the demo coordinator is
// loopback-only, but it checks credentials as an exposed one would.
void MakeDemoTokens(const std::string& dir) {
  const std::string user_token = RandomHex(24);
  setenv("HILNAS_TOKEN", RandomHex(24).c_str(), 1);
  setenv("HILNAS_USER_TOKEN", user_token.c_str(), 1);
  const std::string token_file = dir + "/user-token";
  std::ofstream(token_file, std::ios::trunc) << user_token << "\n";
  std::error_code ec;
  fs::permissions(token_file, fs::perms::owner_read | fs::perms::owner_write, ec);
}

// The coordinator and the fleet as child processes.
struct DemoServices {
  pid_t coordinator = 0;
  pid_t fleet = 0;
  std::string address;
  void Stop() {
    if (fleet > 0) StopChild(fleet);
    if (coordinator > 0) StopChild(coordinator);
  }
};

absl::StatusOr<DemoServices> StartDemoServices(const std::string& dir) {
  std::printf("== coordinator (SQLite %s/demo.db) and a fleet of 2 local agents\n", dir.c_str());
  DemoServices s;
  s.coordinator = SpawnSelf({"coordinator", "--listen=127.0.0.1:0", "--db=" + dir + "/demo.db",
                             "--port-file=" + dir + "/port", "--http=127.0.0.1:0",
                             "--http-port-file=" + dir + "/http_port"},
                            dir + "/coordinator.log");
  const std::string port = WaitForPort(dir + "/port", s.coordinator);
  if (port.empty()) {
    s.Stop();
    return absl::UnavailableError("the demo coordinator did not start; see " + dir +
                                  "/coordinator.log");
  }
  std::string http_port;
  std::ifstream(dir + "/http_port") >> http_port;
  s.address = "127.0.0.1:" + port;
  std::printf(
      "coordinator on %s; web page http://127.0.0.1:%s/ (live progress and front; log in with "
      "the user token in %s/user-token)\n",
      s.address.c_str(), http_port.c_str(), dir.c_str());
  s.fleet = SpawnSelf({"fleet", "--coordinator=" + s.address, "--agents=2", "--fleet-threads=1"},
                      dir + "/fleet.log");
  std::fflush(stdout);
  return s;
}

// Creates the campaign on the demo's coordinator, starts it and follows it.
int CreateAndFollow(const std::string& address, const CampaignConfig& config) {
  ClientFlags client;
  client.coordinator = address;
  absl::StatusOr<std::unique_ptr<UserService::Stub>> stub = UserStub(client);
  if (!stub.ok()) return Fail(stub.status());
  CreateCampaignRequest req;
  *req.mutable_config() = config;
  CampaignStatus status;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(60'000));
  if (grpc::Status s = (*stub)->CreateCampaign(&ctx, req, &status); !s.ok()) {
    return Fail(FromGrpc(s, "create the demo campaign"));
  }
  std::printf(
      "== campaign %s: stage 1 measures latency on the agents, stage 2 prunes, trains "
      "and scores proposals (qNEHVI)\n",
      config.name().c_str());
  return StartCampaign(client, config.name(), /*wait=*/true);
}

absl::Status WriteFront(const std::string& dir, const std::string& name) {
  HILNAS_ASSIGN_OR_RETURN(LoadedCampaign c, LoadCampaignFromDb(dir + "/demo.db", name));
  std::printf("\n== Pareto front: %s\n%s\n\n%s", FrontSummary(c.record, c.trials).c_str(),
              DeploymentSummary(c.record.config).c_str(),
              ParetoTable(c.record, c.trials, /*all=*/false).c_str());
  HILNAS_RETURN_IF_ERROR(WriteFileAtomically(dir + "/front.svg", ParetoSvg(c.record, c.trials)));
  return WriteFileAtomically(dir + "/front.csv", ParetoCsv(c.record, c.trials));
}

int RunDemo(const DemoOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  std::error_code ec;
  fs::create_directories(o.out, ec);
  const std::string dir = fs::absolute(o.out).string();
  absl::StatusOr<CampaignConfig> config = PrepareDemo(o, dir);
  if (!config.ok()) return Fail(config.status());
  MakeDemoTokens(dir);
  absl::StatusOr<DemoServices> services = StartDemoServices(dir);
  if (!services.ok()) return Fail(services.status());
  const int rc = CreateAndFollow(services->address, *config);
  services->Stop();
  if (rc != 0) return rc;
  if (absl::Status s = WriteFront(dir, config->name()); !s.ok()) return Fail(s);
  std::printf(
      "\nwrote %s/front.svg and %s/front.csv in %.0f s\n"
      "look again: hilnas pareto show %s --db %s/demo.db [--all]\n"
      "a checkpoint: hilnas export --db %s/demo.db --campaign %s --trial N --out DIR\n",
      dir.c_str(), dir.c_str(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
      config->name().c_str(), dir.c_str(), dir.c_str(), config->name().c_str());
  return 0;
}

}  // namespace

void AddDemoCommand(Cli& cli) {
  auto [app, o] = cli.Add<DemoOptions>("demo", "[--out hilnas-demo]",
                                       "the README's main job: a small two-stage campaign end to end",
                                       RunDemo);
  app->add_option("--out", o->out, "the demo's folder (database, logs, front.svg, front.csv)");
  app->add_option("--config", o->config, "the campaign; default configs/demo-campaign.textproto")
      ->check(CLI::ExistingFile);
  cli.StableTiming(app, nullptr);
}

}  // namespace hilnas::tools
