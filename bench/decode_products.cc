// A decode step's weight products alone, on 1 thread and on --threads, on
// each thread pool (issue 35, item 3): how much of a step's scaling the
// products keep, with no attention, norms or host noise of a whole model
// between them. The matrices are full4's by default (4 layers of q, k, v,
// o, gate, up, down at d 512, f 1536, kv width 128, and a 4096 x 512 head),
// random, stored as --weight-dtype stores them (Q4_0 grouped where this
// CPU's kernels read groups, as a decoder keeps them), multiplied by the
// runtime's own WeightGemvsInto in the decode step's 17 calls (q, k and v
// in one call; gate and up in one).
//
// Prints, for each call of a layer and for the whole step's 17, the median
// microseconds over --rounds (each the mean of as many calls as take about
// 2 ms on one thread, after as many untimed) on 1 thread, then on N on
// OpenMP, then on N on the spin pool, and the scaling
// (1-thread time / N-thread time; N is the ideal). A call that scales far
// below the rest pays a fixed cost its split cannot share (a hand-over,
// work done again for each piece of a share).
//
// usage: decode_products [--weight-dtype q4_0] [--threads 2] [--rounds 15]
//                        [--d-model 512] [--d-ffn 1536] [--kv-width 128]
//                        [--vocab 4096] [--layers 4]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "bench/bench_util.h"
#include "model/gemv.h"
#include "model/quant.h"
#include "model/work_split.h"

namespace decode_products_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

using hilnas::GemvProduct;
using hilnas::ThreadPool;
using hilnas::bench::Arg;
using hilnas::bench::Median;
using Clock = std::chrono::steady_clock;

[[noreturn]] void Usage(const std::string& why) {
  std::fprintf(stderr,
               "decode_products: %s\nusage: decode_products [--weight-dtype q4_0] [--threads 2] "
               "[--rounds 15] [--d-model 512] [--d-ffn 1536] [--kv-width 128] [--vocab 4096] "
               "[--layers 4]\n",
               why.c_str());
  std::exit(2);
}

int64_t Positive(int argc, char** argv, const char* name, const char* fallback, int64_t most) {
  const std::string s = Arg(argc, argv, name, fallback);
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v <= 0 || v > most) {
    Usage(std::string(name) + " " + s + ": not an integer in 1.." + std::to_string(most));
  }
  return v;
}

// A random [rows, cols] matrix in the storage `dtype` names.
torch::Tensor Matrix(int64_t rows, int64_t cols, const std::string& dtype) {
  torch::Tensor w = torch::randn({rows, cols}) * 0.02;
  if (dtype == "f32") return w;
  if (dtype == "f16") return w.to(torch::kHalf);
  if (dtype == "bf16") return w.to(torch::kBFloat16);
  const std::optional<hilnas::QuantType> t = hilnas::ParseQuantType(dtype);
  if (!t) Usage("--weight-dtype " + dtype + ": not one of f32, f16, bf16, q4_0, q8_0");
  if (cols % hilnas::kQuantBlock != 0) Usage("quantized widths must be multiples of 32");
  absl::StatusOr<torch::Tensor> q = hilnas::QuantizeMatrix(w, *t);
  if (!q.ok()) hilnas::bench::Die(q.status());
  if (hilnas::QuantGroupsRowsHere()) hilnas::GroupQuantRows(*q);  // as a decoder keeps them
  return *q;
}

struct Call {
  std::string name;
  std::vector<GemvProduct> products;
  const float* x;
};

// How many calls of `fn` take about 2 ms, on the setting at hand.
template <typename Fn>
int CallsIn2Ms(Fn fn) {
  const auto t0 = Clock::now();
  int calls = 0;
  while (std::chrono::duration<double>(Clock::now() - t0).count() < 2e-3) {
    fn();
    ++calls;
  }
  return calls;
}

// Mean microseconds of `calls` calls of `fn`, after as many untimed (the
// workers awake, the weights read once).
template <typename Fn>
double MeanMicros(int calls, Fn fn) {
  for (int i = 0; i < calls; ++i) fn();
  const auto t0 = Clock::now();
  for (int i = 0; i < calls; ++i) fn();
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls;
}

}  // namespace

int Main(int argc, char** argv) {
  const std::string dtype = Arg(argc, argv, "--weight-dtype", "q4_0");
  const int threads = static_cast<int>(Positive(argc, argv, "--threads", "2", 256));
  const int rounds = static_cast<int>(Positive(argc, argv, "--rounds", "15", 1000));
  const int64_t d = Positive(argc, argv, "--d-model", "512", 65536);
  const int64_t f = Positive(argc, argv, "--d-ffn", "1536", 262144);
  const int64_t kv = Positive(argc, argv, "--kv-width", "128", 65536);
  const int64_t vocab = Positive(argc, argv, "--vocab", "4096", 1 << 20);
  const int64_t layers = Positive(argc, argv, "--layers", "4", 256);
  const double bytes =
      4.0 * static_cast<double>(layers * (2 * d * d + 2 * d * kv + 3 * d * f) + vocab * d);
  if (bytes > 8e9) Usage("the f32 weights would take over 8 GB before storing");
  torch::manual_seed(1);
  torch::NoGradGuard no_grad;

  struct Layer {
    torch::Tensor q, k, v, o, gate, up, down;
  };
  std::vector<Layer> ls;
  for (int64_t i = 0; i < layers; ++i) {
    ls.push_back({Matrix(d, d, dtype), Matrix(kv, d, dtype), Matrix(kv, d, dtype),
                  Matrix(d, d, dtype), Matrix(f, d, dtype), Matrix(f, d, dtype),
                  Matrix(d, f, dtype)});
  }
  const torch::Tensor head = Matrix(vocab, d, dtype);
  // Inputs and outputs: one buffer each, as the decode step's.
  std::vector<float> x(static_cast<size_t>(std::max(d, f)), 0.1f), q(d), k(kv), v(kv), out(d),
      gate(f), up(f), logits(vocab);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) / 101.0f - 0.5f;
  std::vector<Call> step;
  for (Layer& l : ls) {
    step.push_back({"q k v", {{&l.q, q.data()}, {&l.k, k.data()}, {&l.v, v.data()}}, x.data()});
    step.push_back({"o", {{&l.o, out.data()}}, x.data()});
    step.push_back({"gate up", {{&l.gate, gate.data()}, {&l.up, up.data()}}, x.data()});
    step.push_back({"down", {{&l.down, out.data()}}, x.data()});
  }
  step.push_back({"head", {{&head, logits.data()}}, x.data()});
  auto run = [](const Call& c) {
    hilnas::WeightGemvsInto(c.products.data(), c.products.size(), c.x);
  };
  auto run_step = [&] {
    for (const Call& c : step) run(c);
  };

  std::printf(
      "decode products: %s weights, %lld layers (d %lld, f %lld, kv %lld, vocab %lld), "
      "1 and %d threads, medians of %d rounds\n\n",
      dtype.c_str(), static_cast<long long>(layers), static_cast<long long>(d),
      static_cast<long long>(f), static_cast<long long>(kv), static_cast<long long>(vocab), threads,
      rounds);
  std::printf("| call | us, 1 thread | us, %d on openmp | x | us, %d on spin | x |\n", threads,
              threads);
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  // The first layer's calls, then the whole step (which reads every
  // layer's weights, so each call's from L3 or memory as a model's do).
  std::vector<std::pair<std::string, std::function<void()>>> rows;
  for (size_t i = 0; i < 4; ++i) {
    rows.push_back({step[i].name + " (one layer's)", [&, i] { run(step[i]); }});
  }
  rows.push_back({"head", [&] { run(step.back()); }});
  rows.push_back({"the step's " + std::to_string(step.size()) + " calls", run_step});
  // Each setting's rounds in a row: switching pools within a round left
  // one pool's workers spinning on the CPUs the other's needed (2-thread
  // steps read 1-4x a thread's time, Zen 4).
  for (const auto& [name, fn] : rows) {
    at::set_num_threads(1);
    hilnas::SetThreadPool(ThreadPool::kOpenMp);
    const int calls = CallsIn2Ms(fn);
    auto medians = [&, &fn = fn] {
      std::vector<double> us;
      for (int r = 0; r < rounds; ++r) us.push_back(MeanMicros(calls, fn));
      return Median(us);
    };
    const double one = medians();
    at::set_num_threads(threads);
    const double omp = medians();
    hilnas::SetThreadPool(ThreadPool::kSpin);
    const double spin = medians();
    std::printf("| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", name.c_str(), one, omp, one / omp,
                spin, one / spin);
    std::fflush(stdout);
  }
  hilnas::SetThreadPool(ThreadPool::kOpenMp);
  return 0;
}

}  // namespace decode_products_main
