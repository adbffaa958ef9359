// `hilnas agents list`: the coordinator's registered agents.
#include <grpcpp/grpcpp.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "tools/commands/commands.h"
#include "tools/coordinator_client.h"
#include "util/clock.h"

namespace hilnas::tools {
namespace {

struct AgentsOptions {
  std::string verb;  // list
  ClientFlags client;
  bool json = false;
};

int RunAgents(const AgentsOptions& cl) {
  absl::StatusOr<std::unique_ptr<UserService::Stub>> stub = UserStub(cl.client);
  if (!stub.ok()) return Fail(stub.status());
  grpc::ClientContext ctx;
  ctx.set_deadline(In(10'000));
  ListAgentsResponse resp;
  grpc::Status s = (*stub)->ListAgents(&ctx, ListAgentsRequest(), &resp);
  if (!s.ok()) {
    return Fail(CoordinatorError(s, cl.client));
  }
  if (cl.json) {
    std::string json;
    google::protobuf::util::MessageToJsonString(resp, &json);
    std::printf("%s\n", json.c_str());
    return 0;
  }
  const int64_t now = SystemClock().NowMs();
  std::printf("%-16s %-8s %-8s %-7s %-8s %-14s %-22s %-14s %s\n", "NAME", "STATE", "THREADS",
              "CPUSET", "JOBS", "HEARTBEAT", "DRIFT (TTFT/DECODE)", "RUNTIME", "SOC");
  for (const AgentInfo& a : resp.agents()) {
    const DeviceIdentity& d = a.device();
    // The newest canary against the agent's fastest: "1.03x/1.01x (12)".
    const std::string drift =
        a.canaries() == 0 ? "-"
                          : absl::StrFormat("%.2fx/%.2fx (%d)%s", a.last_canary().ttft_ratio(),
                                            a.last_canary().decode_ratio(), a.canaries(),
                                            a.last_canary().drifted() ? " DRIFT" : "");
    std::printf("%-16s %-8s %-8d %-7s %-8lld %-14s %-22s %-14s %s\n", d.name().c_str(),
                a.state().c_str(), d.threads(), d.cpu_set().empty() ? "-" : d.cpu_set().c_str(),
                static_cast<long long>(a.jobs_done()),
                absl::StrFormat("%.1f s ago", (now - a.last_heartbeat_unix_ms()) / 1000.0).c_str(),
                drift.c_str(), absl::StrCat(d.runtime(), " ", d.runtime_version()).c_str(),
                d.soc().c_str());
  }
  std::printf("%d agents\n", resp.agents_size());
  return 0;
}

}  // namespace

void AddAgentsCommand(Cli& cli) {
  auto [app, o] = cli.Add<AgentsOptions>(
      "agents", "list [--json]", "registered agents, state, last heartbeat, jobs done, drift",
      RunAgents);
  app->add_option("verb", o->verb, "list")->required()->check(CLI::IsMember({"list"}));
  AddClientFlags(app, &o->client, ClientRole::kUser);
  app->add_flag("--json", o->json, "the coordinator's answer as JSON");
}

}  // namespace hilnas::tools
