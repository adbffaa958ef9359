// How where a model's weights lie changes a one-thread decode's weight
// stream (issue 35, item 1: page size). full4's 29 matrices (4 layers of q,
// k, v, o, gate, up, down at d 512, f 1536, kv width 128, and the 4096 x 512
// tied head: 57 MB of f32) are multiplied by a vector with the runtime's own
// GEMV (WeightGemvsInto) in three layouts, passes of the three interleaved
// so drift hits all alike:
//
//   separate   one libtorch allocation per matrix (4 KiB pages)
//   file       one file mapped from the page cache (how llama-bench reads
//              a GGUF file; --file names it, default in /tmp)
//   huge       one 2 MiB-aligned buffer advised MADV_HUGEPAGE, as every
//              decoder's parameters now are (PackParameters, model/decoder.cc)
//
// Prints the minimum and median ms of a pass over all 29 and GB/s at the
// median. Run it several times: physical pages differ from process to
// process. `cat /sys/kernel/mm/transparent_hugepage/enabled` says whether
// the advice can be taken ("never": huge reads as separate).
//
// --forms instead times forms of the one-thread f32 GEMV over the huge
// buffer, passes interleaved likewise: the runtime's own forms (model/gemv.h
// GemvForm: one row at a time, the same with a prefetch 4 KiB ahead, two and
// four rows side by side; all give the same bits, checked here), one row
// at a time in AVX-512 (not the runtime's: its sums go in another order),
// and a plain AVX2 sum of the same bytes (the stream's ceiling on this
// vCPU); then what the runtime's tuner (TuneGemvForm, which `hilnas run`
// and the agents call before timing) picks over the same matrices. Run it
// pinned (`taskset -c N`) to compare forms on one vCPU;
// bench/device_rerun.sh's pinned phase does, vCPU by vCPU. The forms run
// the matrices in a decode step's 17 calls (q, k, v together; gate and up
// together). With --threads N (issue 35, item 3) every form splits each
// call over N threads as the runtime does (on the pool --pool names), and
// one more form reads the whole buffer in a single split a pass: where
// the read-only form reads as fast, the 2-thread GEMV is at the memory's
// ceiling for this split; where the single split reads faster, the calls'
// hand-overs cost that much.
//
// usage: weight_pages [--passes 60] [--file /tmp/hilnas-weight-pages.bin]
//        weight_pages --forms [--passes 60] [--threads 1] [--pool openmp|spin]
#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "model/gemv.h"
#include "model/work_split.h"
#include "util/subprocess.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace weight_pages_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

using hilnas::bench::Arg;
using hilnas::bench::Die;

struct Shape {
  int64_t rows, cols;
};

std::vector<Shape> Full4() {
  std::vector<Shape> m;
  for (int l = 0; l < 4; ++l) {
    for (Shape s : {Shape{512, 512}, Shape{128, 512}, Shape{128, 512}, Shape{512, 512},
                    Shape{1536, 512}, Shape{1536, 512}, Shape{512, 1536}}) {
      m.push_back(s);
    }
  }
  m.push_back({4096, 512});
  return m;
}

// Where each matrix starts in a buffer holding all of them, each at a
// 64-byte boundary; the last entry is the buffer's size.
std::vector<size_t> Offsets(const std::vector<Shape>& shapes) {
  std::vector<size_t> at = {0};
  for (Shape s : shapes) {
    at.push_back(at.back() + (static_cast<size_t>(s.rows * s.cols) * 4 + 63) / 64 * 64);
  }
  return at;
}

// The matrices as views of one buffer at `base` laid out as Offsets says.
std::vector<torch::Tensor> Views(char* base, const std::vector<Shape>& shapes,
                                 const std::vector<size_t>& offsets) {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    out.push_back(
        torch::from_blob(base + offsets[i], {shapes[i].rows, shapes[i].cols}, torch::kFloat));
  }
  return out;
}

#if defined(__x86_64__)
// A form of y = W x that is not the runtime's, over f32 rows of `in`
// floats (in % 64 == 0 for every full4 matrix).
__attribute__((target("avx2,fma"))) inline float Hsum(__m256 a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}

// One row at a time with 512-bit loads: one load per cache line.
__attribute__((target("avx512f"))) void OneRowAvx512(const float* w, const float* x, float* y,
                                                     int64_t rows, int64_t in) {
  for (int64_t o = 0; o < rows; ++o) {
    const float* row = w + o * in;
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(),
           a3 = _mm512_setzero_ps();
    for (int64_t i = 0; i < in; i += 64) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(row + i), _mm512_loadu_ps(x + i), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(row + i + 16), _mm512_loadu_ps(x + i + 16), a1);
      a2 = _mm512_fmadd_ps(_mm512_loadu_ps(row + i + 32), _mm512_loadu_ps(x + i + 32), a2);
      a3 = _mm512_fmadd_ps(_mm512_loadu_ps(row + i + 48), _mm512_loadu_ps(x + i + 48), a3);
    }
    // (not _mm512_reduce_add_ps: GCC 12 warns inside it, maybe-uninitialized)
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    float sum = 0;
    for (float l : lanes) sum += l;
    y[o] = sum;
  }
}

// The bytes alone: a sum with no x, the most a stream gets on this vCPU.
__attribute__((target("avx2"))) float ReadOnly(const float* w, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
         a3 = _mm256_setzero_ps();
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(w + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(w + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_loadu_ps(w + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_loadu_ps(w + i + 24));
  }
  return Hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

// The runtime's decode calls: per layer q, k and v in one, o, gate and up
// in one, down; then the head (17 calls for full4's 29 matrices, as
// Decoder's decode step makes them).
std::vector<std::vector<size_t>> DecodeCalls(size_t matrices) {
  std::vector<std::vector<size_t>> calls;
  size_t m = 0;
  for (; m + 7 <= matrices; m += 7) {
    calls.push_back({m, m + 1, m + 2});
    calls.push_back({m + 3});
    calls.push_back({m + 4, m + 5});
    calls.push_back({m + 6});
  }
  for (; m < matrices; ++m) calls.push_back({m});
  return calls;
}

// fn(matrix, first row, last row) over one call's rows, split over the
// threads as WeightGemvsInto splits them (the call's rows end to end,
// hilnas::ParallelForRowsOf, hilnas::WeightGemvGrainRows a share at least),
// so the forms that are not the runtime's pay the same hand-overs.
void SplitCall(const std::vector<torch::Tensor>& mats, const std::vector<size_t>& call,
               const std::function<void(size_t, int64_t, int64_t)>& fn) {
  int64_t rows[8];  // a call has at most 8 matrices (WeightGemvsInto's limit)
  for (size_t i = 0; i < call.size(); ++i) rows[i] = mats[call[i]].size(0);
  hilnas::ParallelForRowsOf(
      {rows, call.size()}, hilnas::WeightGemvGrainRows(mats[call[0]]),
      [&](size_t i, int64_t first, int64_t last) { fn(call[i], first, last); });
}

// Times each form over all of `mats`, in the decode step's calls, passes
// interleaved, and prints a table; the runtime's forms must give its
// one-row bits and the AVX-512 form its sums within 1e-3 (relative), or
// the run fails. On more than one thread every form splits its calls as
// the runtime does, and one more reads the whole buffer in a single split
// a pass: what the calls' hand-overs cost a memory-bound stream.
int Forms(const std::vector<torch::Tensor>& mats, const float* buffer, size_t bytes, int passes) {
  using Ys = std::vector<std::vector<float>>;
  struct Form {
    std::string name;
    std::function<void(const std::vector<size_t>&, const float*, Ys&)> run;
    bool same_bits;
  };
  std::vector<Form> forms;
  for (hilnas::GemvForm g : hilnas::GemvFormsHere()) {
    forms.push_back({std::string("runtime ") + hilnas::GemvFormName(g),
                     [g, &mats](const std::vector<size_t>& call, const float* x, Ys& ys) {
                       hilnas::SetGemvForm(g);
                       hilnas::GemvProduct products[8];
                       for (size_t i = 0; i < call.size(); ++i) {
                         products[i] = {&mats[call[i]], ys[call[i]].data()};
                       }
                       hilnas::WeightGemvsInto(products, call.size(), x);
                     },
                     true});
  }
  if (__builtin_cpu_supports("avx512f")) {
    forms.push_back({"one row, AVX-512 (not the runtime's)",
                     [&mats](const std::vector<size_t>& call, const float* x, Ys& ys) {
                       SplitCall(mats, call, [&](size_t m, int64_t lo, int64_t hi) {
                         const int64_t in = mats[m].size(1);
                         OneRowAvx512(mats[m].data_ptr<float>() + lo * in, x, ys[m].data() + lo,
                                      hi - lo, in);
                       });
                     },
                     false});
  }
  std::atomic<float> sink{0};
  auto add = [&sink](float v) {
    for (float old = sink.load(); !sink.compare_exchange_weak(old, old + v);) {
    }
  };
  forms.push_back({"read only (no product)",
                   [&](const std::vector<size_t>& call, const float*, Ys&) {
                     SplitCall(mats, call, [&](size_t m, int64_t lo, int64_t hi) {
                       const int64_t in = mats[m].size(1);
                       add(ReadOnly(mats[m].data_ptr<float>() + lo * in, (hi - lo) * in));
                     });
                   },
                   false});
  const int threads = at::get_num_threads();
  const bool whole = threads > 1;
  if (whole) {
    // Run once a pass (on the first call), nothing on the others.
    forms.push_back({"read only, one split a pass",
                     [&](const std::vector<size_t>& call, const float*, Ys&) {
                       if (call[0] != 0) return;
                       const int64_t lines = static_cast<int64_t>(bytes / 64);
                       hilnas::ParallelFor(0, lines, 4096, [&](int64_t first, int64_t last) {
                         add(ReadOnly(buffer + first * 16, (last - first) * 16));
                       });
                     },
                     false});
  }
  const size_t checked = forms.size() - (whole ? 2 : 1);  // the read-only ones have no outputs

  const std::vector<std::vector<size_t>> calls = DecodeCalls(mats.size());
  std::vector<float> x(1536);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.1f * static_cast<float>(i));
  Ys want(mats.size()), got(mats.size());
  for (size_t m = 0; m < mats.size(); ++m) {
    want[m].assign(mats[m].size(0), 0.f);
    got[m].assign(mats[m].size(0), 0.f);
  }
  for (const auto& call : calls) forms[0].run(call, x.data(), want);
  for (size_t f = 1; f < checked; ++f) {
    for (const auto& call : calls) forms[f].run(call, x.data(), got);
    for (size_t m = 0; m < mats.size(); ++m) {
      for (size_t r = 0; r < got[m].size(); ++r) {
        const float err = std::fabs(got[m][r] - want[m][r]);
        if (forms[f].same_bits ? err != 0 : err > 1e-3f * (1.f + std::fabs(want[m][r]))) {
          std::fprintf(stderr, "error: %s: matrix %zu row %zu: %g, the runtime %g\n",
                       forms[f].name.c_str(), m, r, got[m][r], want[m][r]);
          return 1;
        }
      }
    }
  }

  std::vector<std::vector<double>> ms(forms.size());
  for (int p = 0; p < passes; ++p) {
    for (size_t f = 0; f < forms.size(); ++f) {
      const auto start = std::chrono::steady_clock::now();
      for (const auto& call : calls) forms[f].run(call, x.data(), got);
      ms[f].push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
  }
  cpu_set_t set;
  int cpu = -1;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) == 1) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpu = c;
    }
  }
  const std::string where =
      threads > 1 ? absl::StrFormat("%d threads on the %s pool", threads,
                                    hilnas::ThreadPoolName(hilnas::CurrentThreadPool()))
                  : "one thread" +
                        (cpu >= 0 ? " on vCPU " + std::to_string(cpu) : std::string(" (unpinned)"));
  std::printf(
      "full4's matrices, %.1f MB of f32 in one huge-page buffer, %zu calls a pass as a "
      "decode step makes them, %s, %d passes\n\n",
      bytes / 1e6, calls.size(), where.c_str(), passes);
  std::printf(
      "| GEMV form | min ms | median ms | GB/s at the median | median / runtime's |\n"
      "|---|---:|---:|---:|---:|\n");
  const double base = hilnas::bench::Median(ms[0]);
  for (size_t f = 0; f < forms.size(); ++f) {
    const double median = hilnas::bench::Median(ms[f]);
    std::printf("| %s | %.3f | %.3f | %.1f | %.2f |\n", forms[f].name.c_str(),
                *std::min_element(ms[f].begin(), ms[f].end()), median, bytes / 1e6 / median,
                median / base);
  }
  const hilnas::GemvTuning tuning = hilnas::TuneGemvForm(mats);
  std::printf("\nthe runtime's tuner (TuneGemvForm) picks: %s\n", tuning.Describe().c_str());
  hilnas::SetGemvForm(hilnas::GemvForm::kOneRow);
  return 0;
}
#endif

}  // namespace

int Main(int argc, char** argv) {
  const int threads = std::atoi(Arg(argc, argv, "--threads", "1").c_str());
  if (threads < 1) Die(absl::InvalidArgumentError("--threads must be at least 1"));
  hilnas::ReexecWithTimingThreads(argv, threads);
  at::set_num_threads(threads);
  const std::string pool = Arg(argc, argv, "--pool", "openmp");
  if (pool != "openmp" && pool != "spin") {
    Die(absl::InvalidArgumentError("--pool is openmp or spin, not '" + pool + "'"));
  }
  hilnas::SetThreadPool(pool == "spin" ? hilnas::ThreadPool::kSpin : hilnas::ThreadPool::kOpenMp);
  const int passes = std::atoi(Arg(argc, argv, "--passes", "60").c_str());
  const std::string file = Arg(argc, argv, "--file", "/tmp/hilnas-weight-pages.bin");
  if (passes < 1) Die(absl::InvalidArgumentError("--passes must be at least 1"));
  const std::vector<Shape> shapes = Full4();
  const std::vector<size_t> offsets = Offsets(shapes);
  const size_t bytes = offsets.back();
  constexpr size_t kHuge = size_t{2} << 20;
  void* buf = nullptr;
  const size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
  if (posix_memalign(&buf, kHuge, rounded) != 0)
    Die(absl::ResourceExhaustedError("no 2 MiB-aligned buffer"));
  madvise(buf, rounded, MADV_HUGEPAGE);
  bool forms = false;
  for (int i = 1; i < argc; ++i) forms = forms || std::string(argv[i]) == "--forms";
  if (forms) {
#if defined(__x86_64__)
    std::vector<torch::Tensor> huge = Views(static_cast<char*>(buf), shapes, offsets);
    for (torch::Tensor& w : huge) w.copy_(torch::randn(w.sizes()));
    const int rc = Forms(huge, static_cast<const float*>(buf), bytes, passes);
    std::free(buf);
    return rc;
#else
    Die(absl::UnimplementedError("--forms: the candidate forms are x86-64 kernels"));
#endif
  }

  std::vector<torch::Tensor> separate;
  for (Shape s : shapes) separate.push_back(torch::randn({s.rows, s.cols}));

  const int fd = open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0)
    Die(absl::UnavailableError("cannot write " + file));
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapped == MAP_FAILED) Die(absl::UnavailableError("cannot map " + file));
  std::vector<torch::Tensor> in_file = Views(static_cast<char*>(mapped), shapes, offsets);

  std::vector<torch::Tensor> huge = Views(static_cast<char*>(buf), shapes, offsets);
  for (size_t i = 0; i < shapes.size(); ++i) {
    in_file[i].copy_(separate[i]);
    huge[i].copy_(separate[i]);
  }

  const std::vector<std::vector<torch::Tensor>*> layouts = {&separate, &in_file, &huge};
  const char* names[] = {"separate (4 KiB pages)", "file (page cache)", "huge (one buffer)"};
  std::vector<float> x(1536, 0.5f), y(4096);
  std::vector<std::vector<double>> ms(layouts.size());
  for (int p = 0; p < passes; ++p) {
    for (size_t l = 0; l < layouts.size(); ++l) {
      const auto start = std::chrono::steady_clock::now();
      for (const torch::Tensor& w : *layouts[l]) {
        const hilnas::GemvProduct product{&w, y.data()};
        hilnas::WeightGemvsInto(&product, 1, x.data());
      }
      ms[l].push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
  }
  std::printf("full4's matrices, %.1f MB of f32, one thread, %d passes (kernel %s)\n\n",
              bytes / 1e6, passes, hilnas::GemvKernelName());
  std::printf(
      "| weights' pages | min ms | median ms | GB/s at the median |\n|---|---:|---:|---:|\n");
  for (size_t l = 0; l < layouts.size(); ++l) {
    const double median = hilnas::bench::Median(ms[l]);
    std::printf("| %s | %.3f | %.3f | %.1f |\n", names[l],
                *std::min_element(ms[l].begin(), ms[l].end()), median, bytes / 1e6 / median);
  }
  munmap(mapped, bytes);
  close(fd);
  unlink(file.c_str());
  std::free(buf);
  return 0;
}

}  // namespace weight_pages_main
