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
#include <thread>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
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

ABSL_FLAG(std::string, name, "", "agent: device name, unique per coordinator (default: hostname)");
ABSL_FLAG(std::string, cpu_set, "", "agent: pin to these CPUs, e.g. 0-1 or 2,3");
ABSL_FLAG(std::string, pools, "", "agent: comma-separated pools this device serves, e.g. s25");
ABSL_FLAG(std::string, runtime, "libtorch", "agent: libtorch | external");
ABSL_FLAG(std::string, external_format, "llama-bench", "agent: llama-bench | executorch");
ABSL_FLAG(std::string, export_command, "",
          "agent: external runtime: command making {model} from {config}/{checkpoint}");
ABSL_FLAG(std::string, bench_command, "",
          "agent: external runtime: command timing {model} at {prompt_tokens}/{decode_tokens}/"
          "{threads}");
ABSL_FLAG(std::string, runtime_name, "", "agent: external runtime's name, e.g. llama.cpp");
ABSL_FLAG(std::string, runtime_version, "", "agent: external runtime's version, e.g. b4521");
ABSL_FLAG(int32_t, max_jobs, 0, "agent: exit after this many jobs (0 = run until stopped)");
ABSL_FLAG(double, cooldown_ms, 100, "agent: idle time between timed runs");
ABSL_FLAG(int64_t, memory_limit_mb, 0,
          "agent: refuse models needing more (weights + KV cache); 0 = MemAvailable");
ABSL_DECLARE_FLAG(std::string, prompt_lengths);
ABSL_FLAG(int32_t, agents, 2, "fleet: how many local agents");
ABSL_FLAG(std::string, fleet_threads, "",
          "fleet: threads per agent, cycled (e.g. 1,2); default: cores / agents");

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

absl::StatusOr<std::unique_ptr<Runtime>> RuntimeFromFlags() {
  const std::string kind = absl::GetFlag(FLAGS_runtime);
  if (kind == "libtorch") {
    LibtorchRuntimeOptions o;
    o.memory_limit_bytes = absl::GetFlag(FLAGS_memory_limit_mb) << 20;
    return NewLibtorchRuntime(o);
  }
  if (kind == "external") {
    ExternalRuntimeOptions o;
    absl::StatusOr<ExternalFormat> f = ParseExternalFormat(absl::GetFlag(FLAGS_external_format));
    if (!f.ok()) return f.status();
    o.format = *f;
    o.export_command = absl::GetFlag(FLAGS_export_command);
    o.bench_command = absl::GetFlag(FLAGS_bench_command);
    if (o.bench_command.empty()) {
      return absl::InvalidArgumentError("--runtime external needs --bench-command");
    }
    o.name = absl::GetFlag(FLAGS_runtime_name).empty() ? absl::GetFlag(FLAGS_external_format)
                                                       : absl::GetFlag(FLAGS_runtime_name);
    o.version = absl::GetFlag(FLAGS_runtime_version);
    return NewExternalRuntime(o);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--runtime ", kind, " is not one of libtorch, external"));
}

// Runs `hilnas ARGS...` (this binary) as a child; its output goes to `log`,
// or to this process's stdout/stderr when `log` is empty.

}  // namespace

int AgentCommand(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("agent takes flags only"));
  const std::string cpu_set = absl::GetFlag(FLAGS_cpu_set);
  // Pin before libtorch or gRPC create threads: they inherit the mask.
  if (!cpu_set.empty()) {
    if (absl::Status s = PinToCpuSet(cpu_set); !s.ok()) return Fail(s);
  }
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = RuntimeFromFlags();
  if (!runtime.ok()) return Fail(runtime.status());
  AgentOptions o;
  o.coordinator = CoordinatorAddress();
  o.enrollment_token = EnrollmentToken();
  o.device = ProbeDevice();
  o.device.set_name(absl::GetFlag(FLAGS_name).empty() ? Hostname() : absl::GetFlag(FLAGS_name));
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads <= 0) {
    threads = cpu_set.empty()
                  ? o.device.cores()
                  : static_cast<int>(ParseCpuSet(cpu_set).value_or(std::vector<int>{}).size());
  }
  o.device.set_threads(threads);
  o.device.set_cpu_set(cpu_set);
  for (absl::string_view p : absl::StrSplit(absl::GetFlag(FLAGS_pools), ',', absl::SkipEmpty())) {
    o.device.add_pools(std::string(p));
  }
  o.max_jobs = absl::GetFlag(FLAGS_max_jobs);
  o.protocol.cooldown_ms = absl::GetFlag(FLAGS_cooldown_ms);
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

int FleetCommand(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("fleet takes flags only"));
  const int n = absl::GetFlag(FLAGS_agents);
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0 || n > 64) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--agents ", n, " is not in 1..64")));
  }
  std::vector<int> thread_counts;
  for (absl::string_view t :
       absl::StrSplit(absl::GetFlag(FLAGS_fleet_threads), ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(t, &v) || v <= 0 || v > cores) {
      return Fail(absl::InvalidArgumentError(
          absl::StrCat("--fleet-threads: \"", t, "\" is not in 1..", cores)));
    }
    thread_counts.push_back(v);
  }
  if (thread_counts.empty()) thread_counts.push_back(std::max(1, cores / n));
  const std::string prefix =
      absl::GetFlag(FLAGS_name).empty() ? "fleet" : absl::GetFlag(FLAGS_name);
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
    std::vector<std::string> argv = {
        "agent",
        absl::StrCat("--coordinator=", CoordinatorAddress()),
        absl::StrCat("--name=", prefix, "-", i),
        absl::StrCat("--cpu_set=", cpus),
        absl::StrCat("--threads=", t),
        absl::StrCat("--pools=", absl::GetFlag(FLAGS_pools)),
        absl::StrCat("--max_jobs=", absl::GetFlag(FLAGS_max_jobs)),
        absl::StrCat("--cooldown_ms=", absl::GetFlag(FLAGS_cooldown_ms))};
    if (!EnrollmentToken().empty()) argv.push_back(absl::StrCat("--token=", EnrollmentToken()));
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
