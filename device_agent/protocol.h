// The measurement protocol (MobileLLM-Flash Sec. 4.2.2: 1k/2k/4k prompts,
// warm-up, repeated runs): build once, then for each prompt length warm up
// and repeat timed runs until the spread of TTFT and of decode time is small or a cap is hit,
// cooling down between runs. Every sample is kept; summaries are derived from them.
#ifndef HILNAS_DEVICE_AGENT_PROTOCOL_H_
#define HILNAS_DEVICE_AGENT_PROTOCOL_H_

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "device_agent/memory_probe.h"
#include "device_agent/runtime.h"
#include "proto/benchmark.pb.h"
#include "proto/benchmark_request.h"

namespace hilnas {

struct ProtocolOptions {
  // Idle time between runs, ms: lets a phone's clocks recover so one run's
  // heat does not slow the next.
  double cooldown_ms = 100;
  // The quiet-machine gate (issue 18): a run during which other processes
  // used more than `max_foreign_cores` of the agent's CPUs (over the run and
  // the cool-down before it), or the device was hotter than
  // `max_temperature_c`, is discarded (kept in BenchmarkResult.discarded
  // with the reason) and retaken after `discard_cooldown_ms`, at most
  // `max_discards` times per prompt length; after that runs are kept and
  // marked noisy. 0 turns a bound off; `hilnas agent` turns the CPU bound
  // on (--max_foreign_cores 0.25).
  double max_foreign_cores = 0;
  double max_temperature_c = 0;
  int max_discards = 5;
  double discard_cooldown_ms = 1000;
  std::vector<int> cpus;  // the agent's CPU set (its /proc/stat lines); empty: all
  // The memory gate (issue 33, memory_probe.h): before each timed run, a
  // probe read of the run's working set must be within 1 +
  // `max_memory_slowdown` of the agent's baseline; else it is retaken every
  // `memory_wait_ms`, at most `max_memory_waits` times, and a run taken
  // above the bound is discarded like a noisy one. 0: off (also `hilnas
  // agent`'s default: on the EPYC VMs here the slow spells outlast a job,
  // see bench/data/drift.md). The probe is recorded either way.
  double max_memory_slowdown = 0;
  int max_memory_waits = 20;
  double memory_wait_ms = 100;
  // Baselines kept across jobs (the agent's); null: this measurement's own.
  MemoryProbeHistory* memory_history = nullptr;
  // Called with one line per step (build, each run); may be empty.
  std::function<void(const std::string&)> progress;
  // When set and true, measurement stops after the current run and the
  // result fails with RUNTIME_ERROR "cancelled" (the lease was lost). Not owned.
  const std::atomic<bool>* cancel = nullptr;
  // When set, a request it refuses fails with its status before anything
  // is read or built (the agent's own data roots, issue 39).
  std::function<absl::Status(const BenchmarkRequest&)> admit;
};

// Warm-ups last until the process's memory has settled. glibc's heap can
// take two or three generations of the same shapes to stop growing (where
// earlier blocks fell decides whether later ones fit), and a run on fresh
// pages pays a fault for every 4 KiB: full4's all-skip model, 2048 tokens,
// one thread on a Zen 5 VM, took 9216 faults and 443-482 ms to its first
// token in processes whose second generation still grew the heap, 0 faults
// and 245-253 ms in the others, and 0 faults from the third generation on
// in all of them. True when a warm-up took more minor faults than a KV
// cache of `kv_cache_bytes` (a new one each run) on 4 KiB pages, plus
// 1 MiB's worth.
bool MemoryUnsettled(int64_t minor_faults, int64_t kv_cache_bytes);
// At most this many warm-ups beyond those asked for wait for it.
inline constexpr int kMaxSettlingWarmups = 4;
// Whether warm-up `done` (counted from 1; `asked` were asked for), which
// took `minor_faults` with a KV cache of `kv_cache_bytes`, is followed by
// another one beyond those asked for: the last of them or of the extra
// ones, memory unsettled, fewer than kMaxSettlingWarmups extra so far.
bool OneMoreWarmUp(int done, int asked, int64_t minor_faults, int64_t kv_cache_bytes);

// The memory gate's probe size for `request` at `prompt` tokens: the
// weights and the KV cache one decode step reads, in steps of sqrt(2) from
// 1 MiB up to kMaxMemoryProbeBytes.
int64_t MemoryProbeBytes(const BenchmarkRequest& request, int prompt);

// Runs the protocol. Never fails silently: any error ends in a result whose
// `failure` and `failure_message` say what happened, with the samples
// measured so far. `device` is copied into the result.
BenchmarkResult MeasureBenchmark(Runtime& runtime, const BenchmarkRequest& request,
                                 const DeviceIdentity& device, const ProtocolOptions& options);

// Fills `result.summaries` and `throttling_suspected` from its samples.
void Summarise(BenchmarkResult& result);

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_PROTOCOL_H_
