#include "device_agent/protocol.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "device_agent/environment.h"
#include "device_agent/sample_stats.h"
#include "search_space/arch.h"
#include "search_space/counts.h"
#include "util/clock.h"

namespace hilnas {
namespace {

void Say(const ProtocolOptions& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

bool Cancelled(const ProtocolOptions& o) { return o.cancel != nullptr && o.cancel->load(); }

void Fail(BenchmarkResult& r, const absl::Status& s) {
  r.set_failure(FailureKindFor(s));
  r.set_failure_message(std::string(s.message()));
}

// TTFT and decode times of the samples at one prompt length, in run order.
std::pair<std::vector<double>, std::vector<double>> Times(const BenchmarkResult& r, int prompt) {
  std::vector<double> ttft, decode;
  for (const LatencySample& s : r.samples()) {
    if (s.prompt_tokens() != prompt) continue;
    ttft.push_back(s.ttft_ms());
    decode.push_back(s.decode_ms_per_token());
  }
  return {ttft, decode};
}

// Why the quiet-machine gate rejects a run's conditions; empty when it does not.
std::string GateViolation(const RunConditions& c, const ProtocolOptions& o) {
  if (o.max_foreign_cores > 0 && c.foreign_cores() > o.max_foreign_cores) {
    return absl::StrFormat("foreign CPU %.2f cores > %.2f", c.foreign_cores(), o.max_foreign_cores);
  }
  if (o.max_temperature_c > 0 && c.temperature_c() > o.max_temperature_c) {
    return absl::StrFormat("temperature %.0f C > %.0f", c.temperature_c(), o.max_temperature_c);
  }
  if (o.max_memory_slowdown > 0 && c.memory_probe_ratio() > 1 + o.max_memory_slowdown) {
    return absl::StrFormat("memory probe %.2fx of baseline > %.2f", c.memory_probe_ratio(),
                           1 + o.max_memory_slowdown);
  }
  return "";
}

// What one decode step reads: the weights and the KV cache at the prompt's
// depth, from the architecture (a checkpoint's is unknown before it is
// loaded: the probe's cap). f32 cache; bf16/f16 requests store weights in 2 bytes,
// q4_0 and q8_0 in 18 and 34 bytes a block of 32.
}  // namespace

bool MemoryUnsettled(int64_t minor_faults, int64_t kv_cache_bytes) {
  return minor_faults > std::max<int64_t>(kv_cache_bytes, 0) / 4096 + 256;
}

bool OneMoreWarmUp(int done, int asked, int64_t minor_faults, int64_t kv_cache_bytes) {
  return done >= 1 && done >= asked && done < asked + kMaxSettlingWarmups &&
         MemoryUnsettled(minor_faults, kv_cache_bytes);
}

int64_t MemoryProbeBytes(const BenchmarkRequest& req, int prompt) {
  if (!req.has_arch()) return kMaxMemoryProbeBytes;
  absl::StatusOr<Arch> arch = ArchFromProto(req.arch());
  if (!arch.ok()) return kMaxMemoryProbeBytes;
  const double weight_bytes = req.precision() == BF16 || req.precision() == FP16 ? 2
                              : req.precision() == Q4_0                          ? 18.0 / 32
                              : req.precision() == Q8_0                          ? 34.0 / 32
                                                                                 : 4;
  const double bytes = CountParameters(*arch).model() * weight_bytes +
                       KvCacheBytes(*arch, prompt + req.decode_tokens(), 4);
  // In steps of sqrt(2) from 1 MiB, so that jobs of similar size share a
  // baseline instead of each calibrating its own.
  double step = 1 << 20;
  while (step < bytes && step < kMaxMemoryProbeBytes) step *= std::sqrt(2.0);
  return std::min<int64_t>(kMaxMemoryProbeBytes, static_cast<int64_t>(step) / 4096 * 4096);
}

namespace {

// The memory gate: probes until the reading is within the bound or the
// waits run out, and records the last probe in `c`.
void AwaitQuietMemory(MemoryProbe& probe, MemoryProbeHistory& history, const ProtocolOptions& o,
                      RunConditions& c) {
  // A size seen for the first time gets a baseline from probes spread
  // over a second: the slow spells last seconds (memory_probe.h).
  for (int k = history.Readings(probe.bytes()); o.max_memory_slowdown > 0 && k < 10; ++k) {
    history.Add(probe.bytes(), probe.TimeMs());
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.memory_wait_ms));
  }
  double ms = probe.TimeMs();
  double ratio = history.Add(probe.bytes(), ms);
  int waits = 0;
  while (o.max_memory_slowdown > 0 && ratio > 1 + o.max_memory_slowdown &&
         waits < o.max_memory_waits) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.memory_wait_ms));
    ++waits;
    ms = probe.TimeMs();
    ratio = history.Add(probe.bytes(), ms);
  }
  c.set_memory_probe_bytes(probe.bytes());
  c.set_memory_probe_ms(ms);
  c.set_memory_probe_ratio(ratio);
  c.set_memory_waits(waits);
}

// Warm-ups, then timed runs until the TTFT and decode spreads are below the threshold
// (after the minimum repeats) or the cap is reached.
// `in_process`: the runtime's memory is the agent's own (else its runs
// report their process's peak, 0 when it could not be read).
absl::Status MeasurePromptLength(PreparedModel& model, const BenchmarkRequest& req, int prompt,
                                 bool in_process, const ProtocolOptions& o,
                                 BenchmarkResult& result) {
  const auto cooldown = std::chrono::duration<double, std::milli>(o.cooldown_ms);
  // An external runtime's faults are its process's, not counted here.
  bool more = false;
  for (int w = 1; w <= req.warmup_runs() || more; ++w) {
    const int64_t faults_before = in_process ? MinorPageFaults() : 0;
    absl::StatusOr<RunTiming> t = model.Run(prompt, req.decode_tokens());
    if (!t.ok()) return t.status();
    const int64_t faults = in_process ? MinorPageFaults() - faults_before : 0;
    Say(o, absl::StrFormat("prompt %d: warm-up %d/%d TTFT %.1f ms, %d page faults", prompt, w,
                           std::max(w, req.warmup_runs()), t->ttft_ms, faults));
    more = OneMoreWarmUp(w, req.warmup_runs(), faults, t->kv_cache_bytes);
    if (more) Say(o, absl::StrFormat("prompt %d: memory still settling: one more warm-up", prompt));
    std::this_thread::sleep_for(cooldown);
  }
  int discards = 0;
  MemoryProbe probe(MemoryProbeBytes(req, prompt));
  MemoryProbeHistory own_history;
  MemoryProbeHistory& history = o.memory_history != nullptr ? *o.memory_history : own_history;
  CpuCounters mark = ReadCpuCounters(o.cpus);  // the gate's window opens
  for (int i = 0; i < req.max_repeats();) {
    if (Cancelled(o)) return absl::CancelledError("measurement cancelled: lease lost");
    RunConditions memory;
    AwaitQuietMemory(probe, history, o, memory);
    ResetPeakRss();
    absl::StatusOr<RunTiming> t = model.Run(prompt, req.decode_tokens());
    if (!t.ok()) return t.status();
    LatencySample sample;
    sample.set_prompt_tokens(prompt);
    sample.set_ttft_ms(t->ttft_ms);
    sample.set_decode_ms_per_token(t->decode_ms_per_token);
    sample.set_decode_tokens(t->decode_tokens);
    // An external runtime's memory is its process's, not the agent's; the
    // probe's buffer (resident through the run) is the agent's apparatus.
    sample.set_peak_rss_bytes(in_process ? std::max<int64_t>(0, PeakRssBytes() - probe.bytes())
                                         : t->process_peak_rss_bytes);
    sample.set_kv_cache_bytes(t->kv_cache_bytes);
    *sample.mutable_conditions() = ConditionsBetween(mark, ReadCpuCounters(o.cpus));
    sample.mutable_conditions()->MergeFrom(memory);
    const std::string noise = GateViolation(sample.conditions(), o);
    if (!noise.empty()) {
      if (discards < o.max_discards) {
        ++discards;
        DiscardedRun* d = result.add_discarded();
        *d->mutable_sample() = sample;
        d->set_reason(noise);
        Say(o, absl::StrFormat("prompt %d: run discarded (%s), retake %d/%d after %.0f ms", prompt,
                               noise, discards, o.max_discards, o.discard_cooldown_ms));
        std::this_thread::sleep_for(
            std::chrono::duration<double, std::milli>(o.discard_cooldown_ms));
        mark = ReadCpuCounters(o.cpus);
        continue;
      }
      sample.set_noisy(true);  // the retakes ran out: kept, and said so
    }
    ++i;
    LatencySample* s = result.add_samples();
    *s = sample;
    result.set_peak_rss_bytes(std::max(result.peak_rss_bytes(), s->peak_rss_bytes()));
    if (!t->reported_version.empty()) {
      result.mutable_device()->set_runtime_version(t->reported_version);
    }
    // Both figures the latency model learns from must have settled.
    const auto [ttfts, decodes] = Times(result, prompt);
    const double spread = std::max(RelativeSpread(ttfts), RelativeSpread(decodes));
    Say(o, absl::StrFormat("prompt %d: run %d TTFT %.1f ms, decode %.2f ms/token (spread %.3f)%s",
                           prompt, i, t->ttft_ms, t->decode_ms_per_token, spread,
                           s->noisy() ? ", noisy: " + noise : ""));
    if (i >= req.repeats() && spread <= req.max_rel_spread()) break;
    mark = ReadCpuCounters(o.cpus);
    std::this_thread::sleep_for(cooldown);
  }
  return absl::OkStatus();
}

}  // namespace

void Summarise(BenchmarkResult& r) {
  r.clear_summaries();
  std::map<int, std::vector<const LatencySample*>> by_prompt;
  for (const LatencySample& s : r.samples()) by_prompt[s.prompt_tokens()].push_back(&s);
  bool throttled = false;
  for (const auto& [prompt, samples] : by_prompt) {
    std::vector<double> ttft, decode;
    for (const LatencySample* s : samples) {
      ttft.push_back(s->ttft_ms());
      decode.push_back(s->decode_ms_per_token());
    }
    LatencySummary* m = r.add_summaries();
    m->set_prompt_tokens(prompt);
    m->set_ttft_median_ms(Median(ttft));
    m->set_ttft_stderr_ms(MedianStandardError(ttft));
    m->set_ttft_rel_spread(RelativeSpread(ttft));
    m->set_decode_median_ms_per_token(Median(decode));
    m->set_decode_stderr_ms_per_token(MedianStandardError(decode));
    const double d = m->decode_median_ms_per_token();
    m->set_decode_tokens_per_s(d > 0 ? 1000.0 / d : 0.0);
    throttled = throttled || ThrottlingSuspected(ttft) || ThrottlingSuspected(decode);
  }
  r.set_throttling_suspected(throttled);
}

BenchmarkResult MeasureBenchmark(Runtime& runtime, const BenchmarkRequest& request,
                                 const DeviceIdentity& device, const ProtocolOptions& o) {
  BenchmarkResult result;
  const BenchmarkRequest req = WithDefaults(request);
  *result.mutable_device() = device;
  result.mutable_device()->set_runtime(runtime.name());
  result.mutable_device()->set_runtime_version(runtime.version());
  if (req.threads() > 0) result.mutable_device()->set_threads(req.threads());
  *result.mutable_request() = req;
  result.set_started_unix_ms(SystemClock().NowMs());
  absl::Status status = ValidateBenchmarkRequest(req);
  if (status.ok() && o.admit) status = o.admit(req);
  // A runtime that throws (std::bad_alloc, a libtorch error no layer caught)
  // fails this job as RUNTIME_ERROR with the cause; the agent lives on.
  if (status.ok()) try {
      ResetPeakRss();
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<std::unique_ptr<PreparedModel>> model = runtime.Prepare(req);
      if (model.ok()) {
        // Weights and build temporaries, when they are the agent's own.
        if (runtime.runs_in_process()) result.set_peak_rss_bytes(PeakRssBytes());
        Say(o, absl::StrFormat("built in %.0f ms", std::chrono::duration<double, std::milli>(
                                                       std::chrono::steady_clock::now() - t0)
                                                       .count()));
        const std::string kernels = (*model)->kernels();
        if (!kernels.empty()) {
          result.mutable_device()->set_runtime_kernels(kernels);
          Say(o, "kernels: " + kernels);
        }
        for (int prompt : req.prompt_lengths()) {
          status = MeasurePromptLength(**model, req, prompt, runtime.runs_in_process(), o, result);
          ResetPeakRss();  // the memory probe's buffer is gone; it is no run's memory
          if (!status.ok()) break;
        }
      } else {
        status = model.status();
      }
    } catch (const std::exception& e) {
      status = absl::InternalError(absl::StrCat("the runtime threw: ", e.what()));
    }
  if (!status.ok()) Fail(result, status);
  // An external runtime's peak is already the largest of its runs' (each
  // sample's); the agent's own memory (its export step) is not the model's.
  if (runtime.runs_in_process()) {
    result.set_peak_rss_bytes(std::max(result.peak_rss_bytes(), PeakRssBytes()));
  }
  result.set_cpu_temperature_c(CpuTemperatureC());
  result.set_finished_unix_ms(SystemClock().NowMs());
  Summarise(result);
  return result;
}

}  // namespace hilnas
