// Decode test-retest (issue 33): the agent's own path (NewLibtorchRuntime +
// MeasureBenchmark) timing one candidate `--jobs` times in this process,
// each job building its model afresh as an agent does. Prints one line per
// job (TTFT and decode medians, each run's decode, the memory probe) and
// the spread (max/min).
// bench/decode_retest.sh runs it as many fresh processes, which is what a
// fleet of freshly started agents does.
//
// usage: decode_retest [--jobs 1] [--prompt 1024] [--decode 32] [--threads 1]
//                      [--layers 4] [--d-model 256] [--d-ffn 768] [--vocab 4096]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "device_agent/environment.h"
#include "device_agent/libtorch_runtime.h"
#include "device_agent/protocol.h"
#include "model/blas_core.h"
#include "search_space/arch.h"
#include "util/subprocess.h"

namespace decode_retest_main {  // one of hilnas-bench's programs (bench/benches.h)

int Main(int argc, char** argv) {
  using hilnas::bench::Arg;
  const int jobs = std::stoi(Arg(argc, argv, "--jobs", "1"));
  const int threads = std::stoi(Arg(argc, argv, "--threads", "1"));
  hilnas::ReexecWithTimingThreads(argv, threads, hilnas::SetBlasCoreForCpu());  // as agents time
  hilnas::BenchmarkRequest req;
  hilnas::ArchSpec* a = req.mutable_arch();
  a->set_name("retest");
  a->set_num_layers(std::stoi(Arg(argc, argv, "--layers", "4")));
  a->set_d_model(std::stoi(Arg(argc, argv, "--d-model", "256")));
  a->set_d_ffn(std::stoi(Arg(argc, argv, "--d-ffn", "768")));
  a->set_num_heads(4);
  a->set_num_kv_heads(2);
  a->set_head_dim(64);
  a->set_vocab_size(std::stoi(Arg(argc, argv, "--vocab", "4096")));
  a->set_tie_embeddings(true);
  a->set_rope_theta(10000);
  a->set_norm_eps(1e-5);
  for (int i = 0; i < a->num_layers(); ++i) a->add_attention(hilnas::FULL);
  req.add_prompt_lengths(std::stoi(Arg(argc, argv, "--prompt", "1024")));
  req.set_decode_tokens(std::stoi(Arg(argc, argv, "--decode", "32")));
  req.set_warmup_runs(1);
  req.set_repeats(5);
  req.set_max_repeats(5);
  req.set_threads(threads);

  auto runtime = hilnas::NewLibtorchRuntime();
  hilnas::ProtocolOptions o;
  o.cooldown_ms = 20;
  // --memory-gate 0.10: gate on the memory probe (issue 33); 0: off, the
  // agent's default. The probe is recorded either way.
  o.max_memory_slowdown = std::stod(Arg(argc, argv, "--memory-gate", "0"));
  o.max_discards = 10;
  o.discard_cooldown_ms = 200;
  hilnas::MemoryProbeHistory history;
  o.memory_history = &history;
  const hilnas::DeviceIdentity device = hilnas::ProbeDevice();
  std::vector<double> decodes, ttfts;
  for (int j = 0; j < jobs; ++j) {
    const hilnas::BenchmarkResult r = hilnas::MeasureBenchmark(*runtime, req, device, o);
    if (r.failure() != hilnas::FAILURE_NONE) {
      std::fprintf(stderr, "failed: %s\n", r.failure_message().c_str());
      return 1;
    }
    const hilnas::LatencySummary& s = r.summaries(0);
    ttfts.push_back(s.ttft_median_ms());
    decodes.push_back(s.decode_median_ms_per_token());
    const hilnas::RunConditions& c = r.samples(0).conditions();
    std::string runs;
    for (const hilnas::LatencySample& x : r.samples()) {
      runs += " " + std::to_string(x.decode_ms_per_token()).substr(0, 6);
    }
    int waits = 0;
    for (const hilnas::LatencySample& x : r.samples()) waits += x.conditions().memory_waits();
    std::printf(
        "job %d: TTFT %.3f ms, decode %.4f ms/token (runs%s), memory probe %.4f ms "
        "(%.2fx, %d waits, %d runs discarded), MHz %.0f\n",
        j, ttfts.back(), decodes.back(), runs.c_str(), c.memory_probe_ms(), c.memory_probe_ratio(),
        waits, r.discarded_size(), c.cpu_mhz());
    std::fflush(stdout);
  }
  if (jobs > 1) {
    auto spread = [](const std::vector<double>& v) {
      return *std::max_element(v.begin(), v.end()) / *std::min_element(v.begin(), v.end());
    };
    std::printf("spread (max/min): TTFT %.3f, decode %.3f over %d jobs\n", spread(ttfts),
                spread(decodes), jobs);
  }
  return 0;
}

}  // namespace decode_retest_main
