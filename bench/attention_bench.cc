// The attention kernel alone (model/attention.h), a sliding-window layer
// against a full one on the same queries, keys and values (issue 22: at
// 2048 tokens with window 128 a window layer's attention must cost <= 0.15x
// a full layer's). Projections, norms and RoPE are left out: they cost the
// same in both layers and are measured by bench/runtime_compare.sh.
//
// Prefill: T queries over an empty cache (the prompt's own T keys).
// Decode: one query at position T over the T keys before it and itself,
// reading the window's keys from a ring of `window` slots for the window
// layer, as the decoder's cache stores them, through DecodeAttention (raw
// buffers, what a decode step calls). Full and window runs are
// interleaved; medians of --repeats.
//
// --decode-caches 1 times instead one decode query over a full layer's cache
// of each dtype the decoder stores (f32, f16, q8_0: `--kv-dtype`), as
// microseconds a call and the cache's bytes read a second (issue 35: decode
// attention's bandwidth against the GEMV's). --between-mb N reads N MB
// (untimed) before each call, as a decode step streams its weights between
// one layer's attention and the same layer's next (full4: 56.6 MB of f32):
// the cache then comes from L3 or memory, as in the model, not from L2.
//
// usage: attention_bench [--prompts 256,1024,2048] [--threads 1,2] [--window 128]
//                        [--heads 8] [--kv-heads 2] [--head-dim 64] [--repeats 7]
//                        [--decode-caches 1 [--between-mb 0]] [--split-cost 1]
//
// --split-cost 1 times what a split over 2 threads costs this host: an
// at::parallel_for of two empty items (and a bare OpenMP region, and two
// threads spinning on a counter for reference, and hilnas::ParallelFor's
// own workers, model/work_split.h), and of two items of ~2.5 us on each
// pool against the same two run in a row (the price a decode call's split
// over KV heads must earn back; kDecodeParallelWork in model/attention.cc);
// then 16 such items on the spin pool with a worker 1x and 3x slower than
// the caller, and with the caller 3x slower than its worker: whole shares
// against the pieces the faster thread takes.
#include <omp.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "model/attention.h"
#include "model/blas_core.h"
#include "model/quant.h"
#include "model/work_split.h"
#include "util/subprocess.h"

namespace attention_bench_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

using hilnas::bench::Arg;
using hilnas::bench::Median;

std::vector<int64_t> Ints(const std::string& list) {
  std::vector<int64_t> out;
  for (absl::string_view s : absl::StrSplit(list, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(s, &v) || v <= 0) {
      std::fprintf(stderr, "error: bad number '%s' in '%s'\n", std::string(s).c_str(),
                   list.c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

template <typename F>
double Seconds(F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One decode query over `t` cached keys and values of each dtype: the cache
// a decode step reads ([KVH, t, hd] a tensor; Q8_0 rows of hd / 32 blocks).
void DecodeCaches(const std::vector<int64_t>& prompts, const std::vector<int64_t>& threads,
                  int64_t h, int64_t kvh, int64_t hd, int repeats, int64_t between_mb) {
  std::vector<float> stream(between_mb * (1 << 20) / sizeof(float), 1.0f);
  volatile float sink = 0;
  auto evict = [&] {
    float sum = 0;
    for (float x : stream) sum += x;
    sink = sink + sum;
  };
  std::printf("| threads | tokens | cache | us a call | cache MB | GB/s |\n");
  std::printf("|---:|---:|---|---:|---:|---:|\n");
  for (int64_t n_threads : threads) {
    at::set_num_threads(static_cast<int>(n_threads));
    for (int64_t t : prompts) {
      auto k = torch::randn({kvh, t, hd});
      auto v = torch::randn({kvh, t, hd});
      auto q = torch::randn({h, hd});
      auto o = torch::empty({h, hd});
      auto k16 = k.to(torch::kHalf), v16 = v.to(torch::kHalf);
      const int64_t row_bytes = hd / hilnas::kQuantBlock * hilnas::kQ8BlockBytes;
      std::vector<uint8_t> k8(kvh * t * row_bytes), v8(kvh * t * row_bytes);
      for (int64_t r = 0; r < kvh * t; ++r) {
        hilnas::QuantizeRow(hilnas::QuantType::kQ8_0, k.data_ptr<float>() + r * hd, hd,
                            k8.data() + r * row_bytes);
        hilnas::QuantizeRow(hilnas::QuantType::kQ8_0, v.data_ptr<float>() + r * hd, hd,
                            v8.data() + r * row_bytes);
      }
      const float* qp = q.data_ptr<float>();
      float* op = o.data_ptr<float>();
      auto f32 = [&] {
        hilnas::DecodeAttention(qp, h, kvh, hd, k.data_ptr<float>(), v.data_ptr<float>(), t * hd, t,
                                0, t - 1, op);
      };
      auto f16 = [&] {
        hilnas::DecodeAttention(qp, h, kvh, hd, static_cast<const uint16_t*>(k16.data_ptr()),
                                static_cast<const uint16_t*>(v16.data_ptr()), t * hd, t, 0, t - 1,
                                op);
      };
      auto q8 = [&] {
        hilnas::DecodeAttention(qp, h, kvh, hd, k8.data(), v8.data(), t * row_bytes, t, 0, t - 1,
                                op);
      };
      const double bytes[3] = {2.0 * kvh * t * hd * 4, 2.0 * kvh * t * hd * 2,
                               2.0 * kvh * t * row_bytes};
      std::vector<double> us[3];
      for (int r = 0; r <= repeats; ++r) {  // r == 0 warms up; the three interleaved
        double sum[3] = {0, 0, 0};
        for (int i = 0; i < 50; ++i) {
          evict();
          sum[0] += Seconds(f32);
          evict();
          sum[1] += Seconds(f16);
          evict();
          sum[2] += Seconds(q8);
        }
        if (r == 0) continue;
        for (int c = 0; c < 3; ++c) us[c].push_back(sum[c] / 50 * 1e6);
      }
      const char* names[3] = {"f32", "f16", "q8_0"};
      for (int c = 0; c < 3; ++c) {
        const double m = Median(us[c]);
        std::printf("| %lld | %lld | %s | %.1f | %.2f | %.1f |\n", (long long)n_threads,
                    (long long)t, names[c], m, bytes[c] / 1e6, bytes[c] / (m * 1e3));
      }
      std::fflush(stdout);
    }
  }
}

// What a split over two threads costs (--split-cost): medians of 2000
// calls, five rounds. An empty at::parallel_for, the same as a bare
// `#pragma omp parallel` (libgomp), and for reference the floor of a
// fork and join between two threads: a second thread spinning on a shared
// counter, as a pool of spinning workers would; then hilnas's pool
// (hilnas::ParallelFor), which the kernels run on.
void SplitCost() {
  at::set_num_threads(2);
  std::vector<double> sink(2);
  auto item = [&](int64_t a) {
    double x = 0;
    for (int k = 0; k < 3000; ++k) x += k * 1e-9;
    sink[a] += x;
  };
  // The spinning pair, on its own: its second thread would take a core
  // from OpenMP's workers.
  auto spin_pair = [&] {
    alignas(64) std::atomic<int64_t> posted{0};
    alignas(64) std::atomic<int64_t> finished{0};
    std::atomic<bool> stop{false};
    std::thread spinner([&] {
      int64_t seen = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const int64_t g = posted.load(std::memory_order_acquire);
        if (g == seen) {
          hilnas::CpuRelax();
          continue;
        }
        seen = g;
        sink[1] += 1;
        finished.store(g, std::memory_order_release);
      }
    });
    std::vector<double> spin;
    for (int i = 0; i < 2000; ++i) {
      spin.push_back(Seconds([&] {
        const int64_t g = posted.fetch_add(1, std::memory_order_acq_rel) + 1;
        sink[0] += 1;
        while (finished.load(std::memory_order_acquire) != g) hilnas::CpuRelax();
      }));
    }
    stop = true;
    spinner.join();
    return Median(spin);
  };
  std::printf(
      "| round | at::parallel_for, empty us | omp parallel, empty us | spinning pair, empty us | "
      "hilnas::ParallelFor, empty us | split of 2 items us | ParallelFor split of 2 items us | "
      "the 2 items in a row us |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int round = 1; round <= 5; ++round) {
    std::vector<double> empty, omp, split, serial, pool, pool_split;
    for (int i = 0; i < 2000; ++i) {
      empty.push_back(
          Seconds([&] { at::parallel_for(0, 2, 1, [&](int64_t a, int64_t) { sink[a] += 1; }); }));
      omp.push_back(Seconds([&] {
#pragma omp parallel num_threads(2)
        { sink[omp_get_thread_num() & 1] += 1; }
      }));
      split.push_back(
          Seconds([&] { at::parallel_for(0, 2, 1, [&](int64_t a, int64_t) { item(a); }); }));
      serial.push_back(Seconds([&] {
        item(0);
        item(1);
      }));
    }
    // hilnas's pool apart from OpenMP's: interleaved, libgomp's workers,
    // still spinning from the call before, would share the second CPU
    // with the pool's. 5 ms lets them go to sleep, as they do in a decode
    // step whose every split runs on the spin pool.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    hilnas::SetThreadPool(hilnas::ThreadPool::kSpin);
    for (int i = 0; i < 2000; ++i) {
      pool.push_back(Seconds(
          [&] { hilnas::ParallelFor(0, 2, 1, [&](int64_t a, int64_t) { sink[a] += 1; }); }));
      pool_split.push_back(
          Seconds([&] { hilnas::ParallelFor(0, 2, 1, [&](int64_t a, int64_t) { item(a); }); }));
    }
    hilnas::SetThreadPool(hilnas::ThreadPool::kOpenMp);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const double spin = spin_pair();
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n", round,
                Median(empty) * 1e6, Median(omp) * 1e6, spin * 1e6, Median(pool) * 1e6,
                Median(split) * 1e6, Median(pool_split) * 1e6, Median(serial) * 1e6);
  }
}

// One thread slower than the other (--split-cost, second table): 16 items
// of ~2.4 us, each costing `slow` times that on the slower thread, as on a
// phone whose worker, or whose caller (the thread that runs the model),
// landed on a little core. Timed as the 16 in a row on the caller, as two
// shares of 8 run whole (ParallelFor over 2 indices: at::parallel_for's
// equal shares, nothing to take), and as ParallelFor over the 16, whose
// shares come in pieces: the caller, out of its own, takes a slower
// worker's; a worker, out of its own, takes a slower caller's. With slow
// = 1 the last two read what the pieces cost where the threads run at one
// speed.
void SplitUneven() {
  at::set_num_threads(2);
  hilnas::SetThreadPool(hilnas::ThreadPool::kSpin);
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<double> sink(16);
  int slow = 1;
  bool caller_slow = false;
  auto items = [&](int64_t a, int64_t b) {
    const int times = (std::this_thread::get_id() == caller) == caller_slow ? slow : 1;
    for (int64_t i = a; i < b; ++i) {
      double x = 0;
      for (int k = 0; k < 3000 * times; ++k) x += k * 1e-9;
      sink[static_cast<size_t>(i)] += x;
    }
  };
  std::printf(
      "\n| round | slower thread | its speed | 16 items in a row us | two shares of 8, whole us | "
      "ParallelFor over 16 us | pieces taken a call |\n");
  std::printf("|---:|---|---|---:|---:|---:|---:|\n");
  for (int round = 1; round <= 5; ++round) {
    for (const auto& [s, on_caller] : {std::pair{1, false}, {3, false}, {3, true}}) {
      slow = s;
      caller_slow = on_caller;
      std::vector<double> serial, whole, pieces;
      auto taken = [] {
        return hilnas::SpinPoolPiecesTaken() + hilnas::SpinPoolCallersPiecesTaken();
      };
      const int64_t taken_before = taken();
      for (int i = 0; i < 500; ++i) {
        serial.push_back(Seconds([&] { items(0, 16); }));
        whole.push_back(Seconds([&] {
          hilnas::ParallelFor(0, 2, 1, [&](int64_t a, int64_t) { items(a * 8, a * 8 + 8); });
        }));
        pieces.push_back(Seconds([&] { hilnas::ParallelFor(0, 16, 1, items); }));
      }
      std::printf("| %d | %s | 1/%d | %.2f | %.2f | %.2f | %.2f |\n", round,
                  s == 1      ? "none"
                  : on_caller ? "caller"
                              : "worker",
                  s, Median(serial) * 1e6, Median(whole) * 1e6, Median(pieces) * 1e6,
                  static_cast<double>(taken() - taken_before) / 500);
    }
  }
  hilnas::SetThreadPool(hilnas::ThreadPool::kOpenMp);
}

}  // namespace

int Main(int argc, char** argv) {
  // OpenMP as agents run it, OpenBLAS's kernels from this CPU's features.
  hilnas::ReexecWithTimingThreads(argv, 0, hilnas::SetBlasCoreForCpu());
  const auto prompts = Ints(Arg(argc, argv, "--prompts", "256,1024,2048"));
  const auto threads = Ints(Arg(argc, argv, "--threads", "1,2"));
  const int64_t window = Ints(Arg(argc, argv, "--window", "128"))[0];
  const int64_t h = Ints(Arg(argc, argv, "--heads", "8"))[0];
  const int64_t kvh = Ints(Arg(argc, argv, "--kv-heads", "2"))[0];
  const int64_t hd = Ints(Arg(argc, argv, "--head-dim", "64"))[0];
  const int repeats = static_cast<int>(Ints(Arg(argc, argv, "--repeats", "7"))[0]);
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  if (Arg(argc, argv, "--split-cost", "0") == "1") {
    SplitCost();
    SplitUneven();
    return 0;
  }
  if (Arg(argc, argv, "--decode-caches", "0") == "1") {
    int64_t between_mb = 0;
    const std::string between = Arg(argc, argv, "--between-mb", "0");
    if (!absl::SimpleAtoi(between, &between_mb) || between_mb < 0 || between_mb > 4096) {
      std::fprintf(stderr, "error: --between-mb '%s': 0 to 4096\n", between.c_str());
      return 2;
    }
    std::printf(
        "decode attention, heads %lld/%lld x %lld, medians of %d (50 calls each), %lld MB read "
        "between calls\n\n",
        (long long)h, (long long)kvh, (long long)hd, repeats, (long long)between_mb);
    DecodeCaches(prompts, threads, h, kvh, hd, repeats, between_mb);
    return 0;
  }
  std::printf("heads %lld/%lld x %lld, window %lld, medians of %d\n\n", (long long)h,
              (long long)kvh, (long long)hd, (long long)window, repeats);
  std::printf(
      "| threads | tokens | full prefill ms | window prefill ms | ratio | "
      "full decode us | window decode us | ratio |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int64_t n_threads : threads) {
    at::set_num_threads(static_cast<int>(n_threads));
    for (int64_t t : prompts) {
      auto q = torch::randn({1, h, t, hd});
      auto k = torch::randn({1, kvh, t + 1, hd});
      auto v = torch::randn({1, kvh, t + 1, hd});
      auto q1 = torch::randn({h, hd});
      auto o1 = torch::empty({h, hd});
      auto kp = k.narrow(2, 0, t), vp = v.narrow(2, 0, t);
      // The window layer's decode cache: `window` slots, in ring order.
      const int64_t slots = std::min(window, t + 1);
      auto kr = k.narrow(2, t + 1 - slots, slots).contiguous();
      auto vr = v.narrow(2, t + 1 - slots, slots).contiguous();
      std::vector<double> fp, wp, fd, wd;
      for (int r = 0; r <= repeats; ++r) {  // r == 0 warms up
        const double a = Seconds([&] { hilnas::BlockedAttention(q, kp, vp, 0, 0, 0); });
        const double b = Seconds([&] { hilnas::BlockedAttention(q, kp, vp, 0, 0, window); });
        double c = 0, d = 0;
        for (int i = 0; i < 20; ++i) {
          c += Seconds([&] {
            hilnas::DecodeAttention(q1.data_ptr<float>(), h, kvh, hd, k.data_ptr<float>(),
                                    v.data_ptr<float>(), (t + 1) * hd, t + 1, 0, t,
                                    o1.data_ptr<float>());
          });
          d += Seconds([&] {
            hilnas::DecodeAttention(q1.data_ptr<float>(), h, kvh, hd, kr.data_ptr<float>(),
                                    vr.data_ptr<float>(), slots * hd, slots, t + 1 - slots, t,
                                    o1.data_ptr<float>());
          });
        }
        if (r == 0) continue;
        fp.push_back(a);
        wp.push_back(b);
        fd.push_back(c / 20);
        wd.push_back(d / 20);
      }
      std::printf("| %lld | %lld | %.2f | %.2f | %.3f | %.1f | %.1f | %.3f |\n",
                  (long long)n_threads, (long long)t, Median(fp) * 1e3, Median(wp) * 1e3,
                  Median(wp) / Median(fp), Median(fd) * 1e6, Median(wd) * 1e6,
                  Median(wd) / Median(fd));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace attention_bench_main
