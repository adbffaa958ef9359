#include "latency_model/analytic.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "search_space/counts.h"

namespace hilnas {
namespace {

template <typename F>
double MedianSeconds(F&& f) {
  f();
  std::vector<double> s;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    s.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(s.begin(), s.end());
  return s[2];
}

}  // namespace

double DecodeWeightBytes(const Arch& a, int bytes) {
  const ParameterCount pc = CountParameters(a);
  return double(pc.model() - (a.tie_embeddings ? 0 : pc.embedding)) * bytes;
}

Roofline MeasureRoofline(int threads) {
  if (threads > 0) at::set_num_threads(threads);
  torch::NoGradGuard guard;
  Roofline r;
  const int64_t n = 1024;
  auto a = torch::randn({n, n}), b = torch::randn({n, n});
  r.peak_flops = 2.0 * n * n * n / MedianSeconds([&] { torch::matmul(a, b); });
  auto big = torch::ones({int64_t{1} << 28});
  r.bandwidth = big.numel() * 4.0 / MedianSeconds([&] { big.sum().item<float>(); });
  return r;
}

double RooflineTtftMs(const Arch& arch, int prompt_tokens, const Roofline& r) {
  const double compute = PrefillFlops(arch, prompt_tokens) / r.peak_flops;
  const double memory = DecodeWeightBytes(arch, r.bytes_per_weight) / r.bandwidth;
  return 1e3 * std::max(compute, memory);
}

double RooflineDecodeMs(const Arch& arch, int context_tokens, const Roofline& r) {
  const double compute = DecodeFlops(arch, context_tokens) / r.peak_flops;
  const double memory = (DecodeWeightBytes(arch, r.bytes_per_weight) +
                         KvCacheBytes(arch, context_tokens, r.bytes_per_weight)) /
                        r.bandwidth;
  return 1e3 * std::max(compute, memory);
}

}  // namespace hilnas
