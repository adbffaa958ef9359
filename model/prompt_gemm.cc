#include "model/prompt_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/blas_core.h"
#include "model/gemv.h"
#include "model/work_split.h"
#include "util/aligned.h"
#include "util/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hilnas {
namespace {

// -1 until HILNAS_PROMPT_GEMM is read.
std::atomic<int> choice_in_force{-1};
std::atomic<int64_t> own_calls{0};
// Under kAuto: -1 until SetAutoPromptGemm, then 0 (OpenBLAS) or 1 (own).
std::atomic<int> auto_pick{-1};

PromptGemmChoice ChoiceFromEnvironment() {
  const char* value = std::getenv("HILNAS_PROMPT_GEMM");
  if (value == nullptr || std::strcmp(value, "auto") == 0 || value[0] == '\0') {
    return PromptGemmChoice::kAuto;
  }
  if (std::strcmp(value, "own") == 0) return PromptGemmChoice::kOwn;
  if (std::strcmp(value, "blas") == 0) return PromptGemmChoice::kBlas;
  std::fprintf(stderr, "hilnas: HILNAS_PROMPT_GEMM=%s is not own, blas or auto; using auto\n",
               value);
  return PromptGemmChoice::kAuto;
}

#if defined(__x86_64__)
// GCC 12's AVX-512 intrinsics start many results from _mm512_undefined_*,
// which -Wuninitialized reports where they are inlined: model/CMakeLists.txt
// compiles this file alone, without those two warnings.
#define HILNAS_AVX512 __attribute__((target("avx512f")))

// The product is computed as BLIS-style outer products: a micro-tile of up
// to kTileRows rows of x and kPanel output columns keeps its 2 x kTileRows
// sums in registers (28 of the 32 zmm), and each element of k adds one
// row element of x, broadcast, times 32 weights read from a panel that
// holds them column-contiguous ([kc][32]). Each output is one running sum
// in k's order, so nothing is reduced across lanes at the end. The
// dot-product form before it (6 x 4 outputs of 16-lane partial sums,
// reduced per output and per block of 512) ran at 77-84 GFLOP/s on one
// Zen 4 thread against OpenBLAS's 84-89 and a 114 GFLOP/s FMA ceiling
// (bench/core_ceiling); its reductions were about a tenth of its work.
constexpr int kTileRows = 14;
constexpr int64_t kPanel = 32;  // output columns per panel: two zmm
// Elements of k a block of the product sums: a row tile's 14 x 512 floats
// of x (28 KiB) stay in L1 while it passes over every panel of its chunk
// of columns (128 columns at most, 256 KiB packed, in L2). On one Zen 4
// thread (bench/gemm_threads, full4's layer at 256 tokens) blocks of 512
// ran 5-10% faster than blocks of 128 whose panel stayed in L1, and the
// order (row tiles outside, panels inside) keeps x's tile in L1 at any
// prompt length, where panels outside would read all of x once a panel.
constexpr int64_t kKBlock = 512;
// Output columns packed at once: four panels, 256 KiB at kKBlock.
constexpr int64_t kBlockColumns = 4 * kPanel;

// out[r][0, 32) (columns where the masks are set) = x_r . panel over kc
// elements, plus out's own values when accumulate: R rows, one broadcast
// of x_r[p] and two panel vectors per element of k.
template <int R>
HILNAS_AVX512 void MicroTile(const float* x, int64_t ldx, const float* panel, int64_t kc,
                             float* out, int64_t ldo, __mmask16 m0, __mmask16 m1, bool accumulate) {
  __m512 a0[R], a1[R];
  for (int r = 0; r < R; ++r) {
    a0[r] = accumulate ? _mm512_maskz_loadu_ps(m0, out + r * ldo) : _mm512_setzero_ps();
    a1[r] = accumulate ? _mm512_maskz_loadu_ps(m1, out + r * ldo + 16) : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kc; ++p) {
    const __m512 b0 = _mm512_load_ps(panel + p * kPanel);
    const __m512 b1 = _mm512_load_ps(panel + p * kPanel + 16);
    for (int r = 0; r < R; ++r) {
      const __m512 xr = _mm512_set1_ps(x[r * ldx + p]);
      a0[r] = _mm512_fmadd_ps(xr, b0, a0[r]);
      a1[r] = _mm512_fmadd_ps(xr, b1, a1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm512_mask_storeu_ps(out + r * ldo, m0, a0[r]);
    _mm512_mask_storeu_ps(out + r * ldo + 16, m1, a1[r]);
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, __mmask16,
                        __mmask16, bool);

template <size_t... I>
constexpr std::array<TileFn, sizeof...(I)> MakeTiles(std::index_sequence<I...>) {
  return {&MicroTile<static_cast<int>(I) + 1>...};
}
constexpr std::array<TileFn, kTileRows> kTiles = MakeTiles(std::make_index_sequence<kTileRows>());

// r[i] = column i of the 16 x 16 matrix whose rows were r[0..15].
HILNAS_AVX512 inline void Transpose16(__m512 r[16]) {
  __m512 t[16];
  for (int i = 0; i < 8; ++i) {  // per 128-bit lane: [a0 b0 a1 b1], [a2 b2 a3 b3]
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // per lane L: element 4L + e of rows 4i .. 4i + 3
    const __m512d lo = _mm512_castps_pd(t[4 * i]), lo2 = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d hi = _mm512_castps_pd(t[4 * i + 1]), hi2 = _mm512_castps_pd(t[4 * i + 3]);
    r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo, lo2));
    r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo, lo2));
    r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi, hi2));
    r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi, hi2));
  }
  __m512 c[16];
  for (int e = 0; e < 4; ++e) {  // lane L of r[4i + e] is column 4L + e's rows 4i .. 4i + 3
    const __m512 u0 = _mm512_shuffle_f32x4(r[e], r[4 + e], 0x88);
    const __m512 u1 = _mm512_shuffle_f32x4(r[e], r[4 + e], 0xdd);
    const __m512 u2 = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0x88);
    const __m512 u3 = _mm512_shuffle_f32x4(r[8 + e], r[12 + e], 0xdd);
    c[e] = _mm512_shuffle_f32x4(u0, u2, 0x88);
    c[4 + e] = _mm512_shuffle_f32x4(u1, u3, 0x88);
    c[8 + e] = _mm512_shuffle_f32x4(u0, u2, 0xdd);
    c[12 + e] = _mm512_shuffle_f32x4(u1, u3, 0xdd);
  }
  for (int i = 0; i < 16; ++i) r[i] = c[i];
}

// Sixteen elements of a weight row from p (`valid` of them; the rest 0),
// as f32.
HILNAS_AVX512 inline __m512 LoadWeights(const void* row, int64_t p, GemmWeights weights,
                                        __mmask16 valid) {
  if (weights == GemmWeights::kF32) {
    return _mm512_maskz_loadu_ps(valid, static_cast<const float*>(row) + p);
  }
  const uint16_t* from = static_cast<const uint16_t*>(row) + p;
  uint16_t tail[16] = {};  // a masked 16-bit load would need AVX-512BW
  if (valid != 0xffff) {
    std::memcpy(tail, from, static_cast<size_t>(__builtin_popcount(valid)) * sizeof(uint16_t));
    from = tail;
  }
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from));
  if (weights == GemmWeights::kBF16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  return _mm512_cvtph_ps(h);
}

// The panel of weight rows [j0, j0 + 32) (rows past n zeros) over k's
// elements [kb, kb + kc), as f32, [kc][32]: 16 x 16 blocks transposed in
// registers, f16 and bf16 widened as they are read.
HILNAS_AVX512 void PackPanel(const void* w, GemmWeights weights, int64_t n, int64_t k, int64_t j0,
                             int64_t kb, int64_t kc, float* panel) {
  const size_t element = weights == GemmWeights::kF32 ? sizeof(float) : sizeof(uint16_t);
  for (int64_t half = 0; half < 2; ++half) {
    const int64_t first = j0 + 16 * half;
    for (int64_t p = 0; p < kc; p += 16) {
      const __mmask16 valid = static_cast<__mmask16>(kc - p >= 16 ? 0xffff : (1u << (kc - p)) - 1);
      __m512 r[16];
      for (int i = 0; i < 16; ++i) {
        r[i] = first + i < n ? LoadWeights(static_cast<const char*>(w) +
                                               static_cast<size_t>((first + i) * k) * element,
                                           kb + p, weights, valid)
                             : _mm512_setzero_ps();
      }
      Transpose16(r);
      for (int64_t i = 0; i < 16 && p + i < kc; ++i) {
        _mm512_store_ps(panel + (p + i) * kPanel + 16 * half, r[i]);
      }
    }
  }
}

// Output columns [n0, n1) of the product, at most kBlockColumns of them,
// on the calling thread.
HILNAS_AVX512 void ColumnBlock(const float* x, const void* w, GemmWeights weights, int64_t m,
                               int64_t n, int64_t k, int64_t n0, int64_t n1, float* out) {
  thread_local AlignedVector<float> packed;  // on a cache line, as the zmm loads want
  const int64_t panels = (n1 - n0 + kPanel - 1) / kPanel;
  for (int64_t kb = 0; kb < k; kb += kKBlock) {
    const int64_t kc = std::min(kKBlock, k - kb);
    if (static_cast<int64_t>(packed.size()) < panels * kKBlock * kPanel) {
      packed.resize(static_cast<size_t>(panels * kKBlock * kPanel));
    }
    for (int64_t pj = 0; pj < panels; ++pj) {
      PackPanel(w, weights, n1, k, n0 + pj * kPanel, kb, kc, packed.data() + pj * kc * kPanel);
    }
    for (int64_t i = 0; i < m; i += kTileRows) {
      const TileFn tile = kTiles[std::min<int64_t>(kTileRows, m - i) - 1];
      for (int64_t pj = 0; pj < panels; ++pj) {
        const int64_t j = n0 + pj * kPanel, cols = std::min(kPanel, n1 - j);
        const __mmask16 m0 = static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1);
        const __mmask16 m1 = static_cast<__mmask16>(cols >= 32  ? 0xffff
                                                    : cols > 16 ? (1u << (cols - 16)) - 1
                                                                : 0);
        tile(x + i * k + kb, k, packed.data() + pj * kc * kPanel, kc, out + i * n + j, n, m0, m1,
             kb > 0);
      }
    }
  }
}

// Output columns [n0, n1) of the product, on the calling thread, a block
// of at most kBlockColumns at a time so that a block's packed weights stay
// in L2 however many columns the thread was given: one thread is given
// all of them, and a full4 gate's 1536 columns packed at once (3 MiB)
// ran at 130 GFLOP/s against 156 in blocks of 128 on one Emerald Rapids
// thread, a 4096-column head's at 110 against 147. Each output is the same
// sum in k's order either way: the same bits.
HILNAS_AVX512 void Columns(const float* x, const void* w, GemmWeights weights, int64_t m, int64_t n,
                           int64_t k, int64_t n0, int64_t n1, float* out) {
  for (int64_t c = n0; c < n1; c += kBlockColumns) {
    ColumnBlock(x, w, weights, m, n, k, c, std::min(n1, c + kBlockColumns), out);
  }
}
#endif

}  // namespace

std::optional<GemmWeights> GemmWeightsFor(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float:
      return GemmWeights::kF32;
    case c10::ScalarType::Half:
      return GemmWeights::kF16;
    case c10::ScalarType::BFloat16:
      return GemmWeights::kBF16;
    default:
      return std::nullopt;
  }
}

bool OwnPromptGemmAvailable() {
#if defined(__x86_64__)
  return KernelCpuFeatures().avx512f;  // util/cpu_features.h
#else
  return false;
#endif
}

PromptGemmChoice CurrentPromptGemmChoice() {
  int now = choice_in_force.load();
  if (now < 0) {
    int expected = -1;
    choice_in_force.compare_exchange_strong(expected, static_cast<int>(ChoiceFromEnvironment()));
    now = choice_in_force.load();
  }
  return static_cast<PromptGemmChoice>(now);
}

void SetPromptGemmChoice(PromptGemmChoice choice) {
  choice_in_force.store(static_cast<int>(choice));
}

bool UseOwnPromptGemm() {
  if (!OwnPromptGemmAvailable()) return false;
  switch (CurrentPromptGemmChoice()) {
    case PromptGemmChoice::kOwn:
      return true;
    case PromptGemmChoice::kBlas:
      return false;
    case PromptGemmChoice::kAuto:
      break;
  }
  const int pick = auto_pick.load(std::memory_order_relaxed);
  if (pick >= 0) return pick == 1;
  static const bool below = BlasCoreBelowCpu();
  return below;
}

void SetAutoPromptGemm(std::optional<bool> own) {
  auto_pick.store(own ? (*own ? 1 : 0) : -1, std::memory_order_relaxed);
}

std::optional<bool> AutoPromptGemm() {
  const int pick = auto_pick.load(std::memory_order_relaxed);
  if (pick < 0) return std::nullopt;
  return pick == 1;
}

std::string PromptGemmTuning::Describe() const {
  if (!timed) {
    if (!OwnPromptGemmAvailable()) return "OpenBLAS (no AVX-512F: nothing to choose)";
    if (CurrentPromptGemmChoice() != PromptGemmChoice::kAuto) {
      return UseOwnPromptGemm() ? "hilnas's AVX-512 kernel (HILNAS_PROMPT_GEMM=own)"
                                : "OpenBLAS (HILNAS_PROMPT_GEMM=blas)";
    }
    return absl::StrCat(UseOwnPromptGemm() ? "hilnas's AVX-512 kernel" : "OpenBLAS",
                        " (no f32, f16 or bf16 matrix to time)");
  }
  return absl::StrFormat(
      "%s (own %.3f ms, OpenBLAS %.3f ms a pass of %d rows over %.1fM weights, fastest of %d)",
      own ? "hilnas's AVX-512 kernel" : "OpenBLAS", own_ms, blas_ms, rows, weights / 1e6, passes);
}

PromptGemmTuning TunePromptGemm(const std::vector<at::Tensor>& matrices) {
  // 128 rows: each call packs its weights whatever the rows, so fewer rows
  // would weigh the packing (about a tenth of the own product's time at
  // 256 rows on a Zen 4, as OpenBLAS packs too) above a prompt's share.
  constexpr int64_t kRows = 128, kMaxWeights = int64_t{8} << 20;
  constexpr int64_t kMinColumns = 32;  // a panel's (kPanel, x86 only)
  PromptGemmTuning tuning;
  tuning.rows = kRows;
  if (!OwnPromptGemmAvailable() || CurrentPromptGemmChoice() != PromptGemmChoice::kAuto) {
    return tuning;
  }
  struct Matrix {
    const at::Tensor* w;
    GemmWeights layout;
    int64_t n;  // rows timed: a prefix of w's where the whole would pass the budget
  };
  std::vector<Matrix> mats;
  int64_t k_max = 0, n_max = 0, half_max = 0;
  for (const at::Tensor& w : matrices) {
    const std::optional<GemmWeights> layout = GemmWeightsFor(w.scalar_type());
    if (!layout || w.dim() != 2 || !w.is_contiguous() || w.numel() == 0) continue;
    const int64_t k = w.size(1);
    // A large head (a 128K vocabulary) alone would be seconds of products.
    int64_t n = std::min(w.size(0), (kMaxWeights - tuning.weights) / k);
    if (n < kMinColumns) {
      if (!mats.empty()) break;
      n = std::min(w.size(0), kMinColumns);
    }
    mats.push_back({&w, *layout, n});
    tuning.weights += n * k;
    k_max = std::max(k_max, k);
    n_max = std::max(n_max, n);
    if (*layout != GemmWeights::kF32) half_max = std::max(half_max, n * k);
  }
  if (mats.empty()) return tuning;
  AlignedVector<float> x(kRows * k_max), out(kRows * n_max), widened(half_max);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.01f - 0.03f;
  auto pass = [&](bool own) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const Matrix& m : mats) {
      const int64_t n = m.n, k = m.w->size(1);
      if (own) {
        OwnPromptGemm(x.data(), m.w->data_ptr(), m.layout, kRows, n, k, out.data());
        continue;
      }
      const float* w = nullptr;
      if (m.layout == GemmWeights::kF32) {
        w = m.w->data_ptr<float>();
      } else {  // as Project widens a half matrix for OpenBLAS
        WidenInto(m.w->narrow(0, 0, n), widened.data());
        w = widened.data();
      }
      // Declined (not OpenBLAS, or OpenBlasThreadsScope): nothing to time.
      if (!PooledSgemm(x.data(), w, kRows, n, k, out.data())) return -1.0;
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  const double blas_first = pass(false);  // untimed: faults, caches, threads waking
  if (blas_first < 0) return tuning;
  const double first = pass(true) + blas_first;
  tuning.passes = static_cast<int>(std::clamp(150.0 / std::max(first, 1e-3), 3.0, 9.0));
  std::vector<double> own_ms, blas_ms;
  for (int p = 0; p < tuning.passes; ++p) {
    const bool own_first = p % 2 == 0;
    (own_first ? own_ms : blas_ms).push_back(pass(own_first));
    (own_first ? blas_ms : own_ms).push_back(pass(!own_first));
  }
  tuning.timed = true;
  // Each side's fastest pass: another process's bursts only add time, and
  // with three passes a side one burst moved a median by 2x (a build
  // beside `hilnas run` on a 2-vCPU Zen 4).
  tuning.own_ms = *std::min_element(own_ms.begin(), own_ms.end());
  tuning.blas_ms = *std::min_element(blas_ms.begin(), blas_ms.end());
  tuning.own = tuning.own_ms < tuning.blas_ms;
  SetAutoPromptGemm(tuning.own);
  return tuning;
}

std::string PromptKernelsDescription() {
  std::string out = BlasCoreDescription();
  if (UseOwnPromptGemm()) {
    out += ", computed by hilnas's AVX-512 kernel instead";
    if (CurrentPromptGemmChoice() == PromptGemmChoice::kOwn) out += " (HILNAS_PROMPT_GEMM=own)";
  }
  return out;
}

bool OwnPromptGemm(const float* x, const void* w, GemmWeights weights, int64_t m, int64_t n,
                   int64_t k, float* out) {
  if (!OwnPromptGemmAvailable() || m < 1 || n < 1 || k < 1) return false;
#if defined(__x86_64__)
  own_calls.fetch_add(1, std::memory_order_relaxed);
  // Runs of output columns taken by whichever thread is free
  // (model/work_split.h), about two a thread, each 32 to 128 columns:
  // whole panels, and at most four of them, so a chunk's packed weights
  // stay in L2.
  ParallelChunks(n, ChunkFor(n, at::get_num_threads(), 2, kPanel, kPanel, kBlockColumns),
                 [&](int64_t c0, int64_t c1) { Columns(x, w, weights, m, n, k, c0, c1, out); });
  return true;
#else
  (void)x, (void)w, (void)weights, (void)out;
  return false;
#endif
}

int64_t OwnPromptGemmCalls() { return own_calls.load(std::memory_order_relaxed); }

}  // namespace hilnas
