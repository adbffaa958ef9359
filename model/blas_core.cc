#include "model/blas_core.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "model/work_split.h"
#include "util/cpu_features.h"
#include "util/subprocess.h"

namespace hilnas {
namespace {

constexpr char kPinnedFrom[] = "HILNAS_BLAS_PINNED_FROM";

// openblas_get_corename, looked up at run time: hilnas links libtorch, not
// OpenBLAS, and with another BLAS behind libblas.so.3 there is none.
std::string LoadedCore() {
  using CoreName = char* (*)();
  auto fn = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (fn == nullptr) return "";
  const char* name = fn();
  return name == nullptr ? "" : name;
}

std::string WantedCore() {
#if defined(__x86_64__)
  // The features the kernels may use: under HILNAS_CPU_FEATURES=avx2
  // OpenBLAS runs its Haswell kernels too, under =portable its SSE3 ones.
  const CpuFeatures& c = KernelCpuFeatures();
  const bool avx512 = c.avx512f && c.avx512cd && c.avx512bw && c.avx512dq && c.avx512vl;
  const std::string core = BlasCoreForFeatures(avx512, c.avx2 && c.fma);
  return core.empty() && CpuFeaturesCapped() ? "Prescott" : core;
#else
  return "";  // OpenBLAS's arm64 table reads the core type, not a model list
#endif
}

// Whether the loaded core is the one wanted: at least as wide on a CPU
// whose features are its own, no wider under a cap (a cap stands for a CPU
// without the wider instructions).
bool CoreFits(absl::string_view loaded, absl::string_view wanted) {
  return CpuFeaturesCapped() ? BlasCoreMatches(loaded, wanted) : BlasCoreCovers(loaded, wanted);
}

}  // namespace

std::string BlasCoreForFeatures(bool avx512, bool avx2_fma) {
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return "";
}

bool BlasCoreCovers(absl::string_view loaded, absl::string_view wanted) {
  const std::string have = absl::AsciiStrToLower(loaded);
  const std::string want = absl::AsciiStrToLower(wanted);
  if (want.empty() || have == want) return true;
  const bool avx512 = have == "skylakex" || have == "cooperlake" || have == "sapphirerapids";
  if (want == "skylakex") return avx512;
  if (want == "haswell") return avx512 || have == "zen";
  return false;
}

bool BlasCoreMatches(absl::string_view loaded, absl::string_view wanted) {
  const std::string have = absl::AsciiStrToLower(loaded);
  const std::string want = absl::AsciiStrToLower(wanted);
  // OpenBLAS's Zen core runs its Haswell kernels.
  return want.empty() || have == want || (want == "haswell" && have == "zen");
}

bool SetBlasCoreForCpu() {
  const char* mode = std::getenv("HILNAS_BLAS_CORE");
  const std::string how = mode == nullptr ? "" : mode;
  if (how == "keep" || std::getenv(kPinnedFrom) != nullptr) return false;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr && how != "auto") return false;
  const std::string loaded = LoadedCore();
  const std::string wanted = WantedCore();
  if (loaded.empty() || CoreFits(loaded, wanted)) return false;
  setenv(kPinnedFrom, loaded.c_str(), 1);
  setenv("OPENBLAS_CORETYPE", wanted.c_str(), 1);
  return true;
}

void PinBlasCoreToCpu(char** argv) {
  if (SetBlasCoreForCpu()) ReexecForBlasCore(argv);
}

void ReexecForBlasCore(char** argv) {
  // The program run anew starts on the CPUs this one started on, not on the
  // one OpenMP's binding (if any) gave its first thread (util/subprocess.h).
  UndoOpenMpStartupBinding();
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr,
               "hilnas: could not re-execute with OPENBLAS_CORETYPE=%s; matrix products use "
               "OpenBLAS's %s kernels\n",
               std::getenv("OPENBLAS_CORETYPE"), std::getenv(kPinnedFrom));
}

bool BlasCoreBelowCpu() {
  const std::string loaded = LoadedCore();
  return !loaded.empty() && !CoreFits(loaded, WantedCore());
}

std::string BlasCoreDescription() {
  const std::string loaded = LoadedCore();
  if (loaded.empty()) return "not OpenBLAS";
  std::string out = absl::StrCat("OpenBLAS ", loaded);
  const char* from = std::getenv(kPinnedFrom);
  const std::string wanted = WantedCore();
  if (from != nullptr && CoreFits(loaded, wanted)) {
    absl::StrAppend(&out, " (pinned by hilnas: OpenBLAS chose ", from, ")");
  } else if (!CoreFits(loaded, wanted)) {
    // Under a cap a core may miss by being too wide (a user's
    // OPENBLAS_CORETYPE=SkylakeX under HILNAS_CPU_FEATURES=avx2).
    const bool wider = CpuFeaturesCapped() && BlasCoreCovers(loaded, wanted);
    absl::StrAppend(&out, wider ? " (wider than the cap's " : " (below this CPU's ", wanted,
                    std::getenv("OPENBLAS_CORETYPE") != nullptr
                        ? ": OPENBLAS_CORETYPE is set; HILNAS_BLAS_CORE=auto overrides it)"
                        : ")");
  }
  return out;
}

namespace {

using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                       float, float*, int);
using GetThreads = int (*)();
using SetThreads = void (*)(int);

struct OpenBlasCalls {
  Sgemm sgemm = nullptr;
  GetThreads get_threads = nullptr;
  SetThreads set_threads = nullptr;
};

const OpenBlasCalls& OpenBlas() {
  static const OpenBlasCalls calls = [] {
    OpenBlasCalls c;
    // Only OpenBLAS: another BLAS's cblas_sgemm may thread on its own.
    if (dlsym(RTLD_DEFAULT, "openblas_get_corename") == nullptr) return c;
    c.sgemm = reinterpret_cast<Sgemm>(dlsym(RTLD_DEFAULT, "cblas_sgemm"));
    c.get_threads = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
    c.set_threads = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    if (c.get_threads == nullptr || c.set_threads == nullptr) c.sgemm = nullptr;
    return c;
  }();
  return calls;
}

// OpenBLAS's thread count is the process's: PooledSgemm sets it to 1 and
// leaves it there (setting it back after every product made one product in
// four or so wait: a layer's products 8.4 ms or 10.3 ms on 2 threads,
// bench/gemm_threads, instead of 8.4 always), remembering what it was for
// OpenBlasThreadsScope.
std::mutex blas_threads_mutex;
int blas_threads_before_pool = 0;  // 0: not changed
int open_scopes = 0;

}  // namespace

int OpenBlasThreads() {
  const OpenBlasCalls& blas = OpenBlas();
  return blas.get_threads != nullptr ? blas.get_threads() : 0;
}

void SetOpenBlasThreads(int threads) {
  const OpenBlasCalls& blas = OpenBlas();
  std::lock_guard<std::mutex> lock(blas_threads_mutex);  // not under a pooled product
  if (blas.set_threads != nullptr) blas.set_threads(threads);
}

OpenBlasThreadsScope::OpenBlasThreadsScope() {
  std::lock_guard<std::mutex> lock(blas_threads_mutex);
  ++open_scopes;
  const OpenBlasCalls& blas = OpenBlas();
  if (blas.sgemm != nullptr && blas_threads_before_pool > 1 && blas.get_threads() == 1) {
    blas.set_threads(blas_threads_before_pool);
  }
}

OpenBlasThreadsScope::~OpenBlasThreadsScope() {
  std::lock_guard<std::mutex> lock(blas_threads_mutex);
  --open_scopes;
}

namespace {

// A float buffer of the calling thread's, grown to at least `floats` and
// kept for the thread's next product (a prompt's every projection reuses it).
float* ThreadBuffer(std::vector<float>& buffer, int64_t floats) {
  if (static_cast<int64_t>(buffer.size()) < floats) buffer.resize(static_cast<size_t>(floats));
  return buffer.data();
}

// PooledSgemm's body. rows(first, last) gives w's rows [first, last) as
// f32 (last - first) x k, called on the thread whose OpenBLAS call reads
// them; when the split runs along x's rows, once for all n rows.
bool PooledProduct(const float* x, absl::FunctionRef<const float*(int64_t, int64_t)> rows,
                   int64_t m, int64_t n, int64_t k, float* out) {
  const OpenBlasCalls& blas = OpenBlas();
  constexpr int64_t kMaxDim = int64_t{1} << 30;  // cblas takes int sizes
  if (blas.sgemm == nullptr || m < 1 || n < 1 || k < 1 || m > kMaxDim || n > kMaxDim ||
      k > kMaxDim) {
    return false;  // empty products (lda 0 is not a valid call) go to libtorch
  }
  // Products from two threads at once take turns (one pool serves both).
  std::lock_guard<std::mutex> lock(blas_threads_mutex);
  if (open_scopes > 0) return false;  // OpenBLAS's own threads, as training wants
  if (const int now = blas.get_threads(); now != 1) {
    blas_threads_before_pool = now;
    blas.set_threads(1);
  }
  // Chunks taken by whichever thread is free (model/work_split.h), about
  // four a thread, each one single-threaded OpenBLAS call, split along the
  // longer side (PooledSplitsAlongRows) and no thinner than 256 (rows of x,
  // or columns in multiples of 16, the widest SGEMM micro-tile).
  const int threads = at::get_num_threads();
  auto call = [&](int64_t rows, int64_t cols, const float* xp, const float* wp, float* op) {
    // Row-major C = X W^T: CblasRowMajor (101), NoTrans (111), Trans (112).
    blas.sgemm(101, 111, 112, static_cast<int>(rows), static_cast<int>(cols), static_cast<int>(k),
               1.0f, xp, static_cast<int>(k), wp, static_cast<int>(k), 0.0f, op,
               static_cast<int>(n));
  };
  if (PooledSplitsAlongRows(m, n)) {
    const float* w = rows(0, n);
    ParallelChunks(m, ChunkFor(m, threads, 4, 1, 256, m),
                   [&](int64_t r0, int64_t r1) { call(r1 - r0, n, x + r0 * k, w, out + r0 * n); });
  } else {
    ParallelChunks(n, ChunkFor(n, threads, 4, 16, 256, n),
                   [&](int64_t c0, int64_t c1) { call(m, c1 - c0, x, rows(c0, c1), out + c0); });
  }
  return true;
}

}  // namespace

bool PooledSgemm(const float* x, const float* w, int64_t m, int64_t n, int64_t k, float* out) {
  return PooledProduct(
      x, [&](int64_t first, int64_t) { return w + first * k; }, m, n, k, out);
}

bool PooledSplitsAlongRows(int64_t m, int64_t n) { return m > n; }

bool PooledSgemmWidened(const float* x, WeightRowsToF32 widen, int64_t m, int64_t n, int64_t k,
                        float* out) {
  if (PooledSplitsAlongRows(m, n)) return false;  // every call reads all of w: widen it once
  // Each call's own rows, widened by the thread that multiplies them into a
  // buffer of its own, still in its cache when OpenBLAS packs them.
  thread_local std::vector<float> buffer;
  return PooledProduct(
      x,
      [&](int64_t first, int64_t last) -> const float* {
        float* rows = ThreadBuffer(buffer, (last - first) * k);
        widen(first, last, rows);
        return rows;
      },
      m, n, k, out);
}

}  // namespace hilnas
