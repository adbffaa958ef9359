// What a second thread can add on this host at all (issue 35, item 3): the
// ceiling that any runtime's 1 -> N thread scaling is measured against.
//
// Two loops, each run by 1 thread and then by N threads at once, rounds
// alternating, medians reported:
//
//   fma     independent FMA chains in registers (16 of AVX-512's 16 floats,
//           or 12 of AVX2's 8): a core's multiply-add ports and nothing
//           else, what a prompt's matrix products approach;
//   stream  each thread sums its own 64 MiB buffer: memory bandwidth, what
//           a decode step's weight reads approach.
//
// On a machine whose N vCPUs are N idle cores, fma scales N x. A VM whose
// host runs two vCPUs on one core's two hyperthreads, or time-slices them
// with other guests, scales less, and a kernel near the core's peak loses
// most from it: the closer a runtime's 1-thread product is to the fma
// line, the less room its 2-thread run has. --cpus pins the threads to
// each listed set in turn ("0,1 0,8": threads on CPUs 0 and 1, then 0 and
// 8; the 1-thread run on the set's first CPU), to find pairs that share a
// core. Linux only (sched_setaffinity); no libraries beyond the C++ one.
//
// usage: core_ceiling [--threads 2] [--rounds 5] [--seconds 0.3] [--cpus "0,1 0,8"]
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::string Arg(int argc, char** argv, const char* name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], name)) return argv[i + 1];
  }
  return fallback;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Returns a value so the loop is not removed; flops done = iters * 512.
__attribute__((target("avx512f"))) float FmaAvx512(int64_t iters) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_set1_ps(1.0f + i * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  float out[16];
  _mm512_storeu_ps(out, s);
  return out[0] + out[15];
}

// flops done = iters * 192.
__attribute__((target("avx2,fma"))) float FmaAvx2(int64_t iters) {
  __m256 acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_ps(1.0f + i * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  __m256 s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, acc[i]);
  float out[8];
  _mm256_storeu_ps(out, s);
  return out[0] + out[7];
}

__attribute__((target("avx2"))) float Stream(const float* p, int64_t n, int passes) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int r = 0; r < passes; ++r) {
    for (int64_t i = 0; i + 32 <= n; i += 32) {
      a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
      a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
      a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
      a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
    }
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return out[0];
}

struct Kind {
  const char* name;
  const char* unit;
  // Runs one thread's share and returns the work done (flops or bytes).
  double (*run)(int thread, double scale);
};

bool g_avx512 = false;
std::vector<std::unique_ptr<float[], void (*)(void*)>> g_buffers;
constexpr int64_t kStreamFloats = int64_t{16} << 20;  // 64 MiB a thread
std::atomic<float> g_sink{0};

double RunFma(int, double scale) {
  const int64_t iters = static_cast<int64_t>(scale);
  g_sink = g_sink + (g_avx512 ? FmaAvx512(iters) : FmaAvx2(iters));
  return static_cast<double>(iters) * (g_avx512 ? 512.0 : 192.0);
}

double RunStream(int thread, double scale) {
  const int passes = std::max(1, static_cast<int>(scale));
  g_sink = g_sink + Stream(g_buffers[thread].get(), kStreamFloats, passes);
  return static_cast<double>(passes) * kStreamFloats * sizeof(float);
}

void Pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    std::fprintf(stderr, "core_ceiling: cannot pin to CPU %d\n", cpu);
    std::exit(2);
  }
}

// All `cpus.size()` threads run `scale` each, started together; returns the
// total work and the seconds until the last one ended.
std::pair<double, double> RunTogether(const Kind& kind, const std::vector<int>& cpus, double scale);

// Work a second, in each kind's units of `scale`, from short 1-thread runs.
double Calibrate(const Kind& kind, int cpu) {
  for (double scale = kind.run == RunFma ? 1e5 : 1;; scale *= 4) {
    const double s = RunTogether(kind, {cpu}, scale).second;
    if (s >= 0.05) return scale / s;
  }
}

std::pair<double, double> RunTogether(const Kind& kind, const std::vector<int>& cpus,
                                      double scale) {
  const int n = static_cast<int>(cpus.size());
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> work(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      Pin(cpus[i]);
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) {
      }
      work[i] = kind.run(i, scale);
    });
  }
  while (ready.load() < n) {
  }
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  for (std::thread& t : threads) t.join();
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  double total = 0;
  for (double w : work) total += w;
  return {total, s};
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = std::max(1, std::atoi(Arg(argc, argv, "--threads", "2").c_str()));
  const int rounds = std::max(1, std::atoi(Arg(argc, argv, "--rounds", "5").c_str()));
  const double seconds = std::atof(Arg(argc, argv, "--seconds", "0.3").c_str());
  const std::string cpus_arg = Arg(argc, argv, "--cpus", "");
  __builtin_cpu_init();
  g_avx512 = __builtin_cpu_supports("avx512f");
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    std::fprintf(stderr, "core_ceiling: needs AVX2 and FMA\n");
    return 2;
  }
  // Each set of CPUs to pin to; one unpinned set (-1s) when none is given.
  std::vector<std::vector<int>> sets;
  std::istringstream in(cpus_arg);
  for (std::string word; in >> word;) {
    std::vector<int> set;
    std::istringstream parts(word);
    for (std::string cpu; std::getline(parts, cpu, ',');) set.push_back(std::atoi(cpu.c_str()));
    sets.push_back(set);
  }
  if (sets.empty()) sets.push_back(std::vector<int>(threads, -1));
  int most = 0;
  for (const auto& s : sets) most = std::max<int>(most, s.size());
  for (int i = 0; i < most; ++i) {
    float* p = static_cast<float*>(std::aligned_alloc(64, kStreamFloats * sizeof(float)));
    if (p == nullptr) {
      std::fprintf(stderr, "core_ceiling: cannot allocate the stream buffers\n");
      return 2;
    }
    for (int64_t j = 0; j < kStreamFloats; ++j) p[j] = 1e-9f * static_cast<float>(j & 1023);
    g_buffers.emplace_back(p, std::free);
  }
  const Kind kinds[] = {{"fma", "GFLOP/s", RunFma}, {"stream", "GB/s", RunStream}};
  std::printf("%s FMA, %d rounds of %.2f s a run, medians\n\n", g_avx512 ? "AVX-512" : "AVX2",
              rounds, seconds);
  std::printf("| loop | CPUs | 1 thread | %s | scaling |\n|---|---|---:|---:|---:|\n",
              sets[0].size() == 1 ? "1 thread" : "all threads");
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  sched_getaffinity(0, sizeof(allowed), &allowed);
  auto available = [&](const std::vector<int>& set) {
    for (int c : set) {
      if (c >= CPU_SETSIZE || (c >= 0 && !CPU_ISSET(c, &allowed))) return false;
    }
    return true;
  };
  for (const Kind& kind : kinds) {
    for (const auto& set : sets) {
      std::string name;
      for (int c : set) name += (name.empty() ? "" : ",") + (c < 0 ? "any" : std::to_string(c));
      if (!available(set)) {
        std::printf("| %s | %s | not this process's CPUs | | |\n", kind.name, name.c_str());
        continue;
      }
      const double scale = Calibrate(kind, set[0]) * seconds;
      std::vector<double> one, all;
      for (int r = 0; r < rounds; ++r) {
        const auto [w1, s1] = RunTogether(kind, {set[0]}, scale);
        const auto [wn, sn] = RunTogether(kind, set, scale);
        one.push_back(w1 / s1);
        all.push_back(wn / sn);
      }
      const double a = Median(one) / 1e9, b = Median(all) / 1e9;
      std::printf("| %s | %s | %.1f %s | %.1f | %.2fx |\n", kind.name, name.c_str(), a, kind.unit,
                  b, b / a);
      std::fflush(stdout);
    }
  }
  return g_sink.load() == 12345.0f ? 3 : 0;
}
