// How a prompt's matrix products scale with threads (issue 35, item 3):
// one layer's prefill products (q, k, v, o, gate, up, down at T prompt
// tokens, with the residual add and SwiGLU between them, as the decoder
// runs them) timed on 1 thread and on --threads, three ways:
//
//   openblas   libtorch's matmul, OpenBLAS's own worker threads (hilnas's
//              path today);
//   pool       PooledSgemm (model/blas_core.h, what the runtime calls): the
//              output columns split over ATen's thread pool, one
//              single-threaded OpenBLAS call per thread: one pool for every
//              op, as llama.cpp has;
//   pool+fuse  as pool, with q/k/v and gate/up each one product;
//   own        OwnPromptGemm (model/prompt_gemm.h: hilnas's AVX-512
//              product, what the runtime calls where its tuner, which
//              times it against pool, finds it faster), split as pool
//              splits;
//   own f16    the same over f16 weights, widened a block at a time.
//   q4_0       QuantMatmulMany (model/quant.h: the paper's 4-bit weights,
//              grouped eight rows a block as a decoder keeps them, against
//              Q8_0 activations), q/k/v and gate/up each one call as the
//              decoder makes them.
//
// Each figure is the minimum over --rounds of the mean of 32 layers
// (--layers distinct ones in turn, 4: full4's 48 MB of f32 weights), so
// the ratios (1 thread / N threads) are what to read; run beside
// llama-bench's 1- and 2-thread pp rows (bench/runtime_compare.sh) to see
// how much of the prompt's scaling gap the products are.
//
// usage: gemm_threads [--threads 2] [--tokens 256] [--d-model 512]
//                     [--kv-width 128] [--d-ffn 1536] [--layers 4] [--rounds 9]
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "model/blas_core.h"
#include "model/prompt_gemm.h"
#include "model/quant.h"
#include "util/subprocess.h"

namespace gemm_threads_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

using hilnas::bench::Arg;

struct Layer {
  torch::Tensor q, k, v, o, gate, up, down, qkv, gate_up;
};

enum class Mode { kOpenBlas, kPool, kOwn, kQuant };

struct Runner {
  Mode mode;
  // x [T, K] @ w[N, K]^T.
  torch::Tensor Product(const torch::Tensor& x, const torch::Tensor& w) const {
    if (mode == Mode::kOpenBlas) return torch::matmul(x, w.t());
    torch::Tensor out = torch::empty({x.size(0), w.size(0)});
    if (mode == Mode::kOwn) {
      hilnas::OwnPromptGemm(x.data_ptr<float>(), w.data_ptr(),
                            *hilnas::GemmWeightsFor(w.scalar_type()), x.size(0), w.size(0),
                            x.size(1), out.data_ptr<float>());
    } else {
      hilnas::PooledSgemm(x.data_ptr<float>(), w.data_ptr<float>(), x.size(0), w.size(0), x.size(1),
                          out.data_ptr<float>());
    }
    return out;
  }
  torch::Tensor Forward(const Layer& l, const torch::Tensor& x, bool fuse) const {
    if (mode == Mode::kQuant) {
      const torch::Tensor q = hilnas::QuantMatmulMany(x, {l.q, l.k, l.v})[0];
      const torch::Tensor y = x + hilnas::QuantMatmul(q, l.o);
      std::vector<torch::Tensor> gu = hilnas::QuantMatmulMany(y, {l.gate, l.up});
      return hilnas::QuantMatmul(torch::silu_(gu[0]).mul_(gu[1]), l.down);
    }
    torch::Tensor q;
    if (fuse) {
      const torch::Tensor qkv = Product(x, l.qkv);
      q = qkv.narrow(1, 0, l.q.size(0)).contiguous();
    } else {
      q = Product(x, l.q);
      Product(x, l.k);
      Product(x, l.v);
    }
    const torch::Tensor y = x + Product(q, l.o);
    if (fuse) {
      const torch::Tensor gu = Product(y, l.gate_up);
      const int64_t f = l.gate.size(0);
      return Product(torch::silu(gu.narrow(1, 0, f)).mul_(gu.narrow(1, f, f)), l.down);
    }
    torch::Tensor gate = Product(y, l.gate);
    return Product(torch::silu_(gate).mul_(Product(y, l.up)), l.down);
  }
};

// Layers taken in turn, so their weights come from memory as a model's
// do when they outgrow the caches.
double MsPerLayer(const Runner& r, const std::vector<Layer>& layers, const torch::Tensor& x,
                  bool fuse, int rounds) {
  double best = 1e30;
  const size_t n = layers.size();
  for (int round = 0; round < rounds; ++round) {
    for (size_t i = 0; i < n; ++i) r.Forward(layers[i], x, fuse);
    const auto t0 = std::chrono::steady_clock::now();
    constexpr int kLayers = 32;
    for (int i = 0; i < kLayers; ++i) r.Forward(layers[i % n], x, fuse);
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
            kLayers);
  }
  return best;
}

}  // namespace

int Main(int argc, char** argv) {
  const int threads = std::stoi(Arg(argc, argv, "--threads", "2"));
  // As agents time: passive OpenMP waits, OPENBLAS_NUM_THREADS, the CPU's kernels.
  hilnas::ReexecWithTimingThreads(argv, threads, hilnas::SetBlasCoreForCpu());
  const int64_t tokens = std::stoll(Arg(argc, argv, "--tokens", "256"));
  const int64_t d = std::stoll(Arg(argc, argv, "--d-model", "512"));
  const int64_t kv = std::stoll(Arg(argc, argv, "--kv-width", "128"));
  const int64_t ffn = std::stoll(Arg(argc, argv, "--d-ffn", "1536"));
  const int rounds = std::stoi(Arg(argc, argv, "--rounds", "9"));
  if (hilnas::OpenBlasThreads() == 0) {
    std::fprintf(stderr, "gemm_threads: libtorch did not load OpenBLAS\n");
    return 1;
  }
  const int num_layers = std::stoi(Arg(argc, argv, "--layers", "4"));
  torch::NoGradGuard no_grad;
  std::vector<Layer> layers(num_layers), half_layers(num_layers), quant_layers(num_layers);
  for (int i = 0; i < num_layers; ++i) {
    Layer& l = layers[i];
    l.q = torch::randn({d, d}) * 0.05;
    l.k = torch::randn({kv, d}) * 0.05;
    l.v = torch::randn({kv, d}) * 0.05;
    l.o = torch::randn({d, d}) * 0.05;
    l.gate = torch::randn({ffn, d}) * 0.05;
    l.up = torch::randn({ffn, d}) * 0.05;
    l.down = torch::randn({d, ffn}) * 0.05;
    l.qkv = torch::cat({l.q, l.k, l.v});
    l.gate_up = torch::cat({l.gate, l.up});
    // Every matrix of `from` into `to`, converted (the fused ones only
    // where `fused`: the q4_0 row makes the decoder's calls instead).
    auto convert = [](const Layer& from, Layer& to, bool fused, auto&& f) {
      for (auto member : {&Layer::q, &Layer::k, &Layer::v, &Layer::o, &Layer::gate, &Layer::up,
                          &Layer::down, &Layer::qkv, &Layer::gate_up}) {
        if (fused || (member != &Layer::qkv && member != &Layer::gate_up)) {
          to.*member = f(from.*member);
        }
      }
    };
    convert(l, half_layers[i], true, [](const torch::Tensor& w) { return w.to(torch::kHalf); });
    convert(l, quant_layers[i], false, [](const torch::Tensor& w) {
      torch::Tensor q = hilnas::QuantizeMatrix(w, hilnas::QuantType::kQ4_0).value();
      hilnas::GroupQuantRows(q);  // as a decoder keeps them
      return q;
    });
  }
  const torch::Tensor x = torch::randn({tokens, d});
  std::printf("%s; %d layers, %lld tokens, d_model %lld, k/v width %lld, d_ffn %lld\n",
              hilnas::BlasCoreDescription().c_str(), num_layers, static_cast<long long>(tokens),
              static_cast<long long>(d), static_cast<long long>(kv), static_cast<long long>(ffn));
  // Multiply-adds of one layer's products, two flops each.
  const double gflop = 2.0 * tokens * (2 * d * d + 2 * kv * d + 3 * d * ffn) / 1e9;
  std::printf(
      "| products | ms/layer 1 thread | GFLOP/s | ms/layer %d threads | GFLOP/s | scaling "
      "|\n|---|---:|---:|---:|---:|---:|\n",
      threads);
  struct Way {
    const char* name;
    Mode mode;
    bool fuse;
    const std::vector<Layer>* set;  // the layers' matrices in the way's storage
  };
  for (const Way& way :
       {Way{"openblas", Mode::kOpenBlas, false, &layers}, Way{"pool", Mode::kPool, false, &layers},
        Way{"pool+fuse", Mode::kPool, true, &layers}, Way{"own", Mode::kOwn, false, &layers},
        Way{"own f16", Mode::kOwn, false, &half_layers},
        Way{"q4_0", Mode::kQuant, true, &quant_layers}}) {
    if (way.mode == Mode::kOwn && !hilnas::OwnPromptGemmAvailable()) continue;
    const Runner r{way.mode};
    double ms[2];
    for (int i = 0; i < 2; ++i) {
      const int n = i == 0 ? 1 : threads;
      at::set_num_threads(n);
      hilnas::SetOpenBlasThreads(n);  // PooledSgemm sets 1 for its products itself
      ms[i] = MsPerLayer(r, *way.set, x, way.fuse, rounds);
    }
    std::printf("| %s | %.3f | %.0f | %.3f | %.0f | %.2fx |\n", way.name, ms[0],
                gflop / ms[0] * 1e3, ms[1], gflop / ms[1] * 1e3, ms[0] / ms[1]);
  }
  return 0;
}

}  // namespace gemm_threads_main
