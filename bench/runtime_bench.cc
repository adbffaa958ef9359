// The agent's libtorch runtime measured against this machine's own limits,
// both taken in the same run (machines are shared and noisy):
//   - prefill throughput (PrefillFlops / TTFT) as a fraction of a plain
//     fp32 matmul's FLOP/s, the practical compute peak;
//   - decode time per token as a multiple of (weight bytes read per token) /
//     (measured read bandwidth), the memory-bound floor of decoding.
// It runs the exact path an agent runs: NewLibtorchRuntime + MeasureBenchmark.
//
// usage: runtime_bench [--shape NAME] [--prompt N] [--decode N] [--threads T]
//                      [--precision fp32|bf16]
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "device_agent/environment.h"
#include "device_agent/libtorch_runtime.h"
#include "device_agent/protocol.h"
#include "latency_model/analytic.h"
#include "model/blas_core.h"
#include "search_space/arch.h"
#include "search_space/counts.h"
#include "search_space/shapes.h"

namespace runtime_bench_main {  // one of hilnas-bench's programs (bench/benches.h)

int Main(int argc, char** argv) {
  hilnas::PinBlasCoreToCpu(argv);  // OpenBLAS's kernels from this CPU's features
  std::string shape = "mobilellm-flash-350m", precision = "fp32";
  int prompt = 256, decode = 16, threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--shape")) shape = argv[i + 1];
    if (!std::strcmp(argv[i], "--prompt")) prompt = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--decode")) decode = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--precision")) precision = argv[i + 1];
  }
  at::set_num_threads(threads);
  auto s = hilnas::FindShape(shape);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.status().message()).c_str());
    return 1;
  }
  const hilnas::Roofline roofline = hilnas::MeasureRoofline(threads);
  const double peak = roofline.peak_flops, bandwidth = roofline.bandwidth;

  hilnas::BenchmarkRequest req;
  *req.mutable_arch() = hilnas::ArchToProto(s->arch);
  req.add_prompt_lengths(prompt);
  req.set_decode_tokens(decode);
  req.set_threads(threads);
  req.set_repeats(3);
  req.set_max_repeats(5);
  req.set_precision(precision == "bf16" ? hilnas::BF16 : hilnas::FP32);
  auto runtime = hilnas::NewLibtorchRuntime();
  hilnas::ProtocolOptions o;
  o.progress = [](const std::string& line) { std::fprintf(stderr, "  %s\n", line.c_str()); };
  hilnas::DeviceIdentity device = hilnas::ProbeDevice();
  hilnas::BenchmarkResult r = hilnas::MeasureBenchmark(*runtime, req, device, o);
  if (r.failure() != hilnas::FAILURE_NONE) {
    std::fprintf(stderr, "failed: %s\n", r.failure_message().c_str());
    return 1;
  }
  const hilnas::LatencySummary& m = r.summaries(0);
  const hilnas::ParameterCount pc = hilnas::CountParameters(s->arch);
  const int64_t elem = precision == "bf16" ? 2 : 4;
  const double weight_bytes = hilnas::DecodeWeightBytes(s->arch, elem);
  const double prefill_rate = hilnas::PrefillFlops(s->arch, prompt) / (m.ttft_median_ms() / 1e3);
  const double floor_ms = weight_bytes / bandwidth * 1e3;

  std::printf("# %s, %s, %d threads on %s; prompt %d, decode %d\n", shape.c_str(),
              precision.c_str(), threads, device.soc().c_str(), prompt, decode);
  std::printf("# references this run: fp32 matmul %.1f GFLOP/s, read bandwidth %.1f GB/s\n",
              peak / 1e9, bandwidth / 1e9);
  std::printf("| metric | measured | reference | ratio |\n|---|---|---|---|\n");
  std::printf("| prefill GFLOP/s (TTFT %.1f ms ± %.1f) | %.1f | %.1f (matmul) | %.2f of peak |\n",
              m.ttft_median_ms(), m.ttft_stderr_ms(), prefill_rate / 1e9, peak / 1e9,
              prefill_rate / peak);
  std::printf("| decode ms/token (± %.2f) | %.2f | %.2f (%.0f MB / bandwidth) | %.2fx floor |\n",
              m.decode_stderr_ms_per_token(), m.decode_median_ms_per_token(), floor_ms,
              weight_bytes / 1e6, m.decode_median_ms_per_token() / floor_ms);
  std::printf("| peak RSS MiB | %.0f | %.0f (weights) | %.2f |\n", r.peak_rss_bytes() / 1048576.0,
              pc.model() * elem / 1048576.0, r.peak_rss_bytes() / double(pc.model() * elem));
  return 0;
}

}  // namespace runtime_bench_main
