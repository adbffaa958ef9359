// `hilnas agent` (one device agent) and `hilnas fleet` (N local agents, each
// pinned to its own CPU set, to emulate a heterogeneous fleet on one machine).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "device_agent/agent.h"
#include "device_agent/environment.h"
#include "device_agent/external_runtime.h"
#include "device_agent/libtorch_runtime.h"
#include "tools/commands.h"
#include "tools/coordinator_client.h"
#include "tools/flags.h"
#include "util/subprocess.h"

namespace hilnas::tools {

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int) { g_stop = true; }

void Log(const std::string& line) {
  std::fprintf(stderr, "[%s] %s\n",
               absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()).c_str(),
               line.c_str());
}

std::string Hostname() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf[0] ? buf : "agent";
}

absl::StatusOr<std::unique_ptr<Runtime>> RuntimeOf(const CommandLine& cl) {
  const std::string kind = cl.runtime;
  if (kind == "libtorch") {
    LibtorchRuntimeOptions o;
    o.memory_limit_bytes = cl.memory_limit_mb << 20;
    return NewLibtorchRuntime(o);
  }
  if (kind == "external") {
    ExternalRuntimeOptions o;
    absl::StatusOr<ExternalFormat> f = ParseExternalFormat(cl.external_format);
    if (!f.ok()) return f.status();
    o.format = *f;
    o.export_command = cl.export_command;
    o.bench_command = cl.bench_command;
    if (o.bench_command.empty()) {
      return absl::InvalidArgumentError("--runtime external needs --bench-command");
    }
    o.name = cl.runtime_name.empty() ? cl.external_format : cl.runtime_name;
    o.version = cl.runtime_version;
    return NewExternalRuntime(o);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--runtime ", kind, " is not one of libtorch, external"));
}

// Runs `hilnas ARGS...` (this binary) as a child; its output goes to `log`,
// or to this process's stdout/stderr when `log` is empty.

}  // namespace

int AgentCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("agent takes flags only"));
  const std::string cpu_set = cl.cpu_set;
  // Pin before libtorch or gRPC create threads: they inherit the mask.
  if (!cpu_set.empty()) {
    if (absl::Status s = PinToCpuSet(cpu_set); !s.ok()) return Fail(s);
  }
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = RuntimeOf(cl);
  if (!runtime.ok()) return Fail(runtime.status());
  AgentOptions o;
  o.coordinator = CoordinatorAddress(cl);
  o.enrollment_token = EnrollmentToken(cl);
  o.tls = ClientTlsOf(cl);
  o.device = ProbeDevice();
  o.device.set_name(cl.name.empty() ? Hostname() : cl.name);
  int threads = cl.threads;
  if (threads <= 0) {
    threads = cpu_set.empty()
                  ? o.device.cores()
                  : static_cast<int>(ParseCpuSet(cpu_set).value_or(std::vector<int>{}).size());
  }
  o.device.set_threads(threads);
  o.device.set_cpu_set(cpu_set);
  for (absl::string_view p : absl::StrSplit(cl.pools, ',', absl::SkipEmpty())) {
    o.device.add_pools(std::string(p));
  }
  o.max_jobs = cl.max_jobs;
  o.protocol.cooldown_ms = cl.cooldown_ms;
  o.protocol.max_foreign_cores = cl.max_foreign_cores;
  o.protocol.max_memory_slowdown = cl.max_memory_slowdown;
  o.protocol.max_temperature_c = cl.max_temperature_c;
  o.protocol.max_discards = cl.max_discards;
  o.protocol.discard_cooldown_ms = cl.discard_cooldown_ms;
  o.protocol.cpus = ParseCpuSet(cpu_set).value_or(std::vector<int>{});
  o.canary_every_jobs = cl.canary ? cl.canary_every_jobs : 0;
  o.canary_every_ms = cl.canary ? cl.canary_every_s * 1000 : 0;
  if (cl.canary && o.canary_every_jobs <= 0 && o.canary_every_ms <= 0) {
    o.canary_every_ms = std::numeric_limits<int64_t>::max() / 2;  // before the first job only
  }
  o.drift_cooldown_ms = cl.drift_cooldown_ms;
  o.log = Log;
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  Log(absl::StrCat(o.device.name(), ": agent for ", o.coordinator, ", ", (*runtime)->name(), " ",
                   (*runtime)->version(), ", ", threads, " threads",
                   cpu_set.empty() ? "" : absl::StrCat(" on CPUs ", cpu_set)));
  // Jobs that leave `threads` unset run with the agent's own count.
  Agent agent(o, *std::move(runtime));
  absl::Status s = agent.Run(g_stop);
  Log(absl::StrCat(o.device.name(), ": stopped after ", agent.jobs_done(), " jobs"));
  return s.ok() ? 0 : Fail(s);
}

int FleetCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("fleet takes flags only"));
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
  if (const std::string token = EnrollmentToken(cl); !token.empty()) {
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
                                     absl::StrCat("--coordinator=", CoordinatorAddress(cl)),
                                     absl::StrCat("--name=", prefix, "-", i),
                                     absl::StrCat("--cpu_set=", cpus),
                                     absl::StrCat("--threads=", t),
                                     absl::StrCat("--pools=", cl.pools),
                                     absl::StrCat("--max_jobs=", cl.max_jobs),
                                     absl::StrCat("--cooldown_ms=", cl.cooldown_ms),
                                     absl::StrCat("--max_foreign_cores=", cl.max_foreign_cores),
                                     absl::StrCat("--max_memory_slowdown=", cl.max_memory_slowdown),
                                     absl::StrCat("--max_temperature_c=", cl.max_temperature_c),
                                     absl::StrCat("--max_discards=", cl.max_discards),
                                     absl::StrCat("--discard_cooldown_ms=", cl.discard_cooldown_ms),
                                     absl::StrCat("--canary=", cl.canary ? "true" : "false"),
                                     absl::StrCat("--canary_every_jobs=", cl.canary_every_jobs),
                                     absl::StrCat("--canary_every_s=", cl.canary_every_s),
                                     absl::StrCat("--drift_cooldown_ms=", cl.drift_cooldown_ms)};
    const ClientTls tls = ClientTlsOf(cl);
    for (const auto& [flag, value] : {std::pair<const char*, std::string>{"--tls_ca=", tls.ca_file},
                                      {"--tls_cert=", tls.cert_file},
                                      {"--tls_key=", tls.key_file},
                                      {"--tls_server_name=", tls.server_name}}) {
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

}  // namespace hilnas::tools
