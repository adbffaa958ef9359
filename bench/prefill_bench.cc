// Prefill and decode of the libtorch decoder on this machine, reported as
// ratios to references measured in the same run (machines are shared and
// noisy): achieved prefill FLOP/s as a fraction of a plain fp32 matmul's
// FLOP/s, and TTFT at each prefill chunk relative to chunk 1024
// (MobileLLM-Flash Sec. 4.2.2 found 1024 best for 2k prompts on a phone).
//
// usage: prefill_bench [--shape NAME] [--prompt N] [--threads T] [--repeats R]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "model/blas_core.h"
#include "model/decoder.h"
#include "model/generate.h"
#include "search_space/counts.h"
#include "search_space/shapes.h"

namespace prefill_bench_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

using hilnas::bench::Median;

// FLOP/s of an n x n x n fp32 matmul: the machine's practical compute peak.
double MatmulFlops(int64_t n, int repeats) {
  auto a = torch::randn({n, n}), b = torch::randn({n, n});
  torch::matmul(a, b);  // warm-up
  std::vector<double> s;
  for (int i = 0; i < repeats; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    torch::matmul(a, b);
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * n * n * n / Median(s);
}

}  // namespace

int Main(int argc, char** argv) {
  hilnas::PinBlasCoreToCpu(argv);  // OpenBLAS's kernels from this CPU's features
  std::string shape = "mobilellm-flash-350m";
  int64_t prompt = 512;
  int threads = 2, repeats = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--shape"))
      shape = argv[i + 1];
    else if (!std::strcmp(argv[i], "--prompt"))
      prompt = std::stoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads"))
      threads = std::stoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--repeats"))
      repeats = std::stoi(argv[i + 1]);
  }
  at::set_num_threads(threads);
  auto s = hilnas::FindShape(shape);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", std::string(s.status().message()).c_str());
    return 1;
  }
  auto decoder = hilnas::Decoder::Create(s->arch, 0);
  if (!decoder.ok()) return 1;
  const double peak = MatmulFlops(1024, 5);
  std::printf("# %s, prompt %lld tokens, %d threads, fp32; matmul reference %.1f GFLOP/s\n",
              shape.c_str(), static_cast<long long>(prompt), threads, peak / 1e9);
  std::printf(
      "| chunk | TTFT median ms | vs chunk 1024 | prefill GFLOP/s | fraction of matmul |\n");
  std::printf("|---|---|---|---|---|\n");
  std::vector<int64_t> prompt_ids(prompt);
  for (int64_t i = 0; i < prompt; ++i) prompt_ids[i] = (i * 7919) % s->arch.vocab_size;
  const double flops = hilnas::PrefillFlops(s->arch, prompt);
  std::vector<std::pair<int64_t, double>> rows;
  for (int64_t chunk : {1024, 512, 256, 128}) {
    hilnas::GenerateOptions o;
    o.max_new_tokens = 1;
    o.prefill_chunk = chunk;
    hilnas::GreedyGenerate(*decoder, prompt_ids, o).IgnoreError();  // warm-up
    std::vector<double> ttft;
    for (int r = 0; r < repeats; ++r)
      ttft.push_back(hilnas::GreedyGenerate(*decoder, prompt_ids, o)->stats.ttft_ms());
    rows.push_back({chunk, Median(ttft)});
  }
  for (const auto& [chunk, ms] : rows) {
    const double rate = flops / (ms / 1000.0);
    std::printf("| %lld | %.1f | %.2f | %.1f | %.2f |\n", static_cast<long long>(chunk), ms,
                ms / rows[0].second, rate / 1e9, rate / peak);
  }
  return 0;
}

}  // namespace prefill_bench_main
