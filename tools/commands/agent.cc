// `hilnas agent`: one device agent: registers with the coordinator, leases
// benchmark jobs one at a time, measures them, reports.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "device_agent/agent.h"
#include "device_agent/environment.h"
#include "device_agent/external_runtime.h"
#include "device_agent/libtorch_runtime.h"
#include "model/kernel_check.h"
#include "tools/commands/agent.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "tools/coordinator_client.h"
#include "util/subprocess.h"

namespace hilnas::tools {
namespace {

struct AgentCommandOptions {
  std::string name;  // default: hostname
  std::string cpu_set;
  int32_t threads = 0;
  ClientFlags client;
  AgentGateFlags gate;
  std::string runtime = "libtorch";
  std::string external_format = "llama-bench";
  std::string export_command;
  std::string bench_command;
  std::string runtime_name;
  std::string runtime_version;
  int64_t memory_limit_mb = 0;
  bool check_kernels = false;
  CompareFlags compare;
  PricingFlags pricing;
};

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

absl::StatusOr<std::unique_ptr<Runtime>> RuntimeOf(const AgentCommandOptions& cl) {
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

}  // namespace

// --check-kernels: the runtime's kernels on this CPU against the portable
// loops and a double reference (model/kernel_check.h); no coordinator.
int CheckKernelsHere(int threads) {
  absl::StatusOr<KernelCheck> check = CheckKernels(threads);
  if (!check.ok()) return Fail(check.status());
  std::printf("%s", check->Report().c_str());
  return check->ok() ? 0 : 1;
}

int RunAgent(const AgentCommandOptions& cl) {
  const AgentGateFlags& gate = cl.gate;
  const std::string cpu_set = cl.cpu_set;
  // Pin before libtorch or gRPC create threads: they inherit the mask.
  if (!cpu_set.empty()) {
    if (absl::Status s = PinToCpuSet(cpu_set); !s.ok()) return Fail(s);
  }
  if (cl.check_kernels)
    return CheckKernelsHere(cl.threads > 0 ? cl.threads : ProbeDevice().cores());
  // The one-shot measurements: --threads, else the CPUs the process may use.
  auto threads_here = [&] {
    if (cl.threads > 0) return static_cast<int>(cl.threads);
    return cpu_set.empty()
               ? ProbeDevice().cores()
               : static_cast<int>(ParseCpuSet(cpu_set).value_or(std::vector<int>{1}).size());
  };
  if (!cl.compare.llama_bench.empty()) return CompareWithLlamaBench(cl.compare, threads_here());
  if (cl.pricing.price_windows) {
    return PriceWindowsHere(cl.pricing, threads_here(), cl.memory_limit_mb << 20);
  }
  absl::StatusOr<std::unique_ptr<Runtime>> runtime = RuntimeOf(cl);
  if (!runtime.ok()) return Fail(runtime.status());
  AgentOptions o;
  o.coordinator = CoordinatorAddress(cl.client);
  o.enrollment_token = EnrollmentToken(cl.client);
  o.tls = ClientTlsOf(cl.client);
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
  for (absl::string_view p : absl::StrSplit(gate.pools, ',', absl::SkipEmpty())) {
    o.device.add_pools(std::string(p));
  }
  absl::StatusOr<DataRoots> roots = DataRoots::Make(gate.data_roots, "this agent's");
  if (!roots.ok()) return Fail(roots.status());
  o.data_roots = *std::move(roots);
  o.max_jobs = gate.max_jobs;
  o.protocol.cooldown_ms = gate.cooldown_ms;
  o.protocol.max_foreign_cores = gate.max_foreign_cores;
  o.protocol.max_memory_slowdown = gate.max_memory_slowdown;
  o.protocol.max_temperature_c = gate.max_temperature_c;
  o.protocol.max_discards = gate.max_discards;
  o.protocol.discard_cooldown_ms = gate.discard_cooldown_ms;
  o.protocol.cpus = ParseCpuSet(cpu_set).value_or(std::vector<int>{});
  o.canary_every_jobs = gate.canary ? gate.canary_every_jobs : 0;
  o.canary_every_ms = gate.canary ? gate.canary_every_s * 1000 : 0;
  if (gate.canary && o.canary_every_jobs <= 0 && o.canary_every_ms <= 0) {
    o.canary_every_ms = std::numeric_limits<int64_t>::max() / 2;  // before the first job only
  }
  o.drift_cooldown_ms = gate.drift_cooldown_ms;
  o.log = Log;
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  Log(absl::StrCat(o.device.name(), ": agent for ", o.coordinator, ", ", (*runtime)->name(), " ",
                   (*runtime)->version(), ", ", threads, " threads",
                   cpu_set.empty() ? "" : absl::StrCat(" on CPUs ", cpu_set)));
  // Fewer CPUs than threads (a --cpu-set or taskset narrower than
  // --threads; an emulator's host): the prices are those of threads taking
  // turns, which a phone with the cores would not pay.
  if (const std::string crowded = FewerCpusThanThreads(threads); !crowded.empty()) {
    Log(absl::StrCat(o.device.name(), ": warning: ", crowded));
  }
  // Jobs that leave `threads` unset run with the agent's own count.
  Agent agent(o, *std::move(runtime));
  absl::Status s = agent.Run(g_stop);
  Log(absl::StrCat(o.device.name(), ": stopped after ", agent.jobs_done(), " jobs"));
  return s.ok() ? 0 : Fail(s);
}

void AddAgentGateFlags(CLI::App* app, AgentGateFlags* g) {
  app->add_option("--pools", g->pools, "comma-separated pools this device serves, e.g. s25");
  app->add_option("--max-jobs", g->max_jobs, "exit after this many jobs (0 = run until stopped)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--cooldown-ms", g->cooldown_ms, "idle time between timed runs")
      ->check(CLI::Range(0.0, 600'000.0));
  app->add_option("--max-foreign-cores", g->max_foreign_cores,
                  "quiet-machine gate: retake a run during which other processes used more than "
                  "this many of the agent's CPUs (0: off)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-memory-slowdown", g->max_memory_slowdown,
                  "memory gate: time a run only when a read of its working set is within 1 + "
                  "this of the agent's baseline (0: off)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-temperature-c", g->max_temperature_c,
                  "quiet-machine gate: retake a run taken above this temperature, C (0: off)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--max-discards", g->max_discards,
                  "quiet-machine gate: retakes per prompt length before noisy runs are kept")
      ->check(CLI::Range(0, 1000));
  app->add_option("--discard-cooldown-ms", g->discard_cooldown_ms,
                  "quiet-machine gate: wait before a retake")
      ->check(CLI::Range(0.0, 600'000.0));
  app->add_flag("--canary,!--no-canary", g->canary,
                "run the coordinator's drift-check canary before the first job and every "
                "--canary-every-jobs jobs or --canary-every-s seconds (default on; "
                "--canary=false turns it off)");
  app->add_option("--canary-every-jobs", g->canary_every_jobs,
                  "re-time the canary after this many jobs (0: off)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--canary-every-s", g->canary_every_s,
                  "re-time the canary when older than this (0: off)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--data-root", g->data_roots,
                  "a folder jobs' checkpoint_dir may name (repeatable; symlinks followed, "
                  "checked whatever the coordinator sends); none: no checkpoint jobs, only "
                  "architectures on random weights");
  app->add_option("--drift-cooldown-ms", g->drift_cooldown_ms,
                  "rest this long after a job was re-queued for drift, then re-time the canary")
      ->check(CLI::NonNegativeNumber);
}

std::vector<std::string> AgentGateArgs(const AgentGateFlags& g) {
  std::vector<std::string> args = {absl::StrCat("--pools=", g.pools),
                                   absl::StrCat("--max-jobs=", g.max_jobs),
                                   absl::StrCat("--cooldown-ms=", g.cooldown_ms),
                                   absl::StrCat("--max-foreign-cores=", g.max_foreign_cores),
                                   absl::StrCat("--max-memory-slowdown=", g.max_memory_slowdown),
                                   absl::StrCat("--max-temperature-c=", g.max_temperature_c),
                                   absl::StrCat("--max-discards=", g.max_discards),
                                   absl::StrCat("--discard-cooldown-ms=", g.discard_cooldown_ms),
                                   absl::StrCat("--canary=", g.canary ? "true" : "false"),
                                   absl::StrCat("--canary-every-jobs=", g.canary_every_jobs),
                                   absl::StrCat("--canary-every-s=", g.canary_every_s),
                                   absl::StrCat("--drift-cooldown-ms=", g.drift_cooldown_ms)};
  for (const std::string& root : g.data_roots) args.push_back("--data-root=" + root);
  return args;
}

void AddAgentCommand(Cli& cli) {
  auto [app, o] = cli.Add<AgentCommandOptions>(
      "agent",
      "[--coordinator ADDR --name NAME --token T --threads N --cpu-set 0-1 --pools P\n"
      "    --tls-ca F [--tls-cert F --tls-key F] --runtime libtorch|external ...]",
      "a device agent: lease benchmark jobs, measure, report", RunAgent);
  app->add_option("--name", o->name, "device name, unique per coordinator (default: hostname)");
  app->add_option("--cpu-set", o->cpu_set, "pin to these CPUs, e.g. 0-1 or 2,3");
  app->add_option("--threads", o->threads, "threads per job; 0 = the CPU set's size")
      ->check(CLI::Range(0, 1024));
  AddClientFlags(app, &o->client, ClientRole::kAgent);
  AddAgentGateFlags(app, &o->gate);
  app->add_option("--runtime", o->runtime, "libtorch | external")
      ->check(CLI::IsMember({"libtorch", "external"}));
  app->add_option("--external-format", o->external_format,
                  "external runtime's output: llama-bench | executorch");
  app->add_option("--export-command", o->export_command,
                  "external runtime: command making {model} from {config}/{checkpoint}, or "
                  "builtin:gguf (hilnas writes llama.cpp's GGUF file)");
  app->add_option("--bench-command", o->bench_command,
                  "external runtime: command timing {model} at {prompt_tokens}/{decode_tokens}/"
                  "{depth}/{threads}");
  app->add_option("--runtime-name", o->runtime_name, "external runtime's name, e.g. llama.cpp");
  app->add_option("--runtime-version", o->runtime_version,
                  "external runtime's version, e.g. b4521");
  app->add_option("--memory-limit-mb", o->memory_limit_mb,
                  "refuse models needing more (weights + KV cache); 0 = MemAvailable")
      ->check(CLI::NonNegativeNumber);
  app->add_flag("--check-kernels", o->check_kernels,
                "check this CPU's GEMV and attention kernels against the portable loops and a "
                "double-precision reference on --threads threads, print the errors and exit "
                "(no coordinator)");
  AddCompareFlags(app, &o->compare);
  AddPricingFlags(app, &o->pricing);
  cli.StableTiming(app, &o->threads);
}

}  // namespace hilnas::tools
