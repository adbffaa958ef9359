// `hilnas fleet`: N local agents, each pinned to its own CPU set, to
// emulate a heterogeneous fleet on one machine.
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tools/commands/agent.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "tools/coordinator_client.h"

namespace hilnas::tools {
namespace {

struct FleetOptions {
  int32_t agents = 2;
  std::string fleet_threads;  // threads per agent, cycled; default cores / agents
  std::string name;           // agents are NAME-0, NAME-1, ...
  ClientFlags client;
  AgentGateFlags gate;
};

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

void Log(const std::string& line) {
  std::fprintf(stderr, "[%s] %s\n",
               absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()).c_str(),
               line.c_str());
}

int RunFleet(const FleetOptions& cl) {
  const int n = cl.agents;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0 || n > 64) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--agents ", n, " is not in 1..64")));
  }
  std::vector<int> thread_counts;
  for (absl::string_view t : absl::StrSplit(cl.fleet_threads, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(t, &v) || v <= 0 || v > cores) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--fleet-threads: \"", t, "\" is not in 1..", cores)));
    }
    thread_counts.push_back(v);
  }
  if (thread_counts.empty()) thread_counts.push_back(std::max(1, cores / n));
  const std::string prefix = cl.name.empty() ? "fleet" : cl.name;
  // The token reaches the agents through their environment, not their
  // command lines (which every user of the machine can read in ps).
  if (const std::string token = EnrollmentToken(cl.client); !token.empty()) {
    setenv("HILNAS_TOKEN", token.c_str(), 1);
  }
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  std::vector<pid_t> children;
  int next_cpu = 0;
  for (int i = 0; i < n; ++i) {
    const int t = thread_counts[i % thread_counts.size()];
    // Consecutive CPUs, wrapping: with more threads than cores agents share
    // CPUs, and their timings interfere (said below).
    std::string cpus;
    for (int k = 0; k < t; ++k)
      absl::StrAppend(&cpus, cpus.empty() ? "" : ",", (next_cpu + k) % cores);
    next_cpu = (next_cpu + t) % cores;
    std::vector<std::string> argv = {"agent",
                                     absl::StrCat("--coordinator=", CoordinatorAddress(cl.client)),
                                     absl::StrCat("--name=", prefix, "-", i),
                                     absl::StrCat("--cpu-set=", cpus),
                                     absl::StrCat("--threads=", t)};
    for (std::string& a : AgentGateArgs(cl.gate)) argv.push_back(std::move(a));
    const ClientTls tls = ClientTlsOf(cl.client);
    for (const auto& [flag, value] : {std::pair<const char*, std::string>{"--tls-ca=", tls.ca_file},
                                      {"--tls-cert=", tls.cert_file},
                                      {"--tls-key=", tls.key_file},
                                      {"--tls-server-name=", tls.server_name}}) {
      if (!value.empty()) argv.push_back(flag + value);
    }
    const pid_t pid = SpawnSelf(argv);
    Log(absl::StrCat("fleet: started ", prefix, "-", i, " (pid ", pid, ") on CPUs ", cpus, ", ", t,
                     " threads"));
    children.push_back(pid);
  }
  int total_threads = 0;
  for (int i = 0; i < n; ++i) total_threads += thread_counts[i % thread_counts.size()];
  if (total_threads > cores) {
    Log(absl::StrCat("fleet: warning: ", total_threads, " threads on ", cores,
                     " cores; agents share CPUs and slow each other"));
  }
  int alive = n, failures = 0;
  while (alive > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      --alive;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
      continue;
    }
    if (g_stop.load()) {
      for (pid_t c : children) kill(c, SIGTERM);
      g_stop = false;  // signal once; then wait
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Log(absl::StrCat("fleet: all ", n, " agents exited, ", failures, " with an error"));
  return failures == 0 ? 0 : 1;
}

}  // namespace

void AddFleetCommand(Cli& cli) {
  auto [app, o] = cli.Add<FleetOptions>("fleet", "--agents N [--fleet-threads 1,2 --coordinator ADDR]",
                                        "N local agents, each pinned to its own CPUs", RunFleet);
  app->add_option("--agents", o->agents, "how many local agents");
  app->add_option("--fleet-threads", o->fleet_threads,
                  "threads per agent, cycled (e.g. 1,2); default: cores / agents");
  app->add_option("--name", o->name, "agents are named NAME-0, NAME-1, ... (default fleet)");
  AddClientFlags(app, &o->client, ClientRole::kAgent);
  AddAgentGateFlags(app, &o->gate);
}

}  // namespace hilnas::tools
