#include "model/prompt_gemm.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "model/blas_core.h"
#include "model/work_split.h"
#include "util/aligned.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hilnas {
namespace {

// -1 until HILNAS_PROMPT_GEMM is read.
std::atomic<int> choice_in_force{-1};

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

// Elements of k a pass sums: a tile's six rows of x (12 KiB) stay in L1
// while it passes over a block's columns.
constexpr int64_t kKBlock = 512;
// Bytes of w per block of columns: stays in L2 (Zen 4/5 1 MiB, Xeon 2 MiB)
// while every row tile of x passes over it (128 KiB to 512 KiB measured
// alike within the noise on a Zen 5, bench/gemm_threads).
constexpr int64_t kBlockBytes = 256 << 10;
// Rows of x and of w (output rows and columns) a tile computes.
constexpr int kTileRows = 6;
constexpr int kTileCols = 4;

// [sum of c0's 16 lanes, c1's, c2's, c3's].
HILNAS_AVX512 inline __m128 Sum4(__m512 c0, __m512 c1, __m512 c2, __m512 c3) {
  // Per 128-bit lane: [c0 0+2, c1 0+2, c0 1+3, c1 1+3], the same for c2, c3.
  const __m512 h01 = _mm512_add_ps(_mm512_unpacklo_ps(c0, c1), _mm512_unpackhi_ps(c0, c1));
  const __m512 h23 = _mm512_add_ps(_mm512_unpacklo_ps(c2, c3), _mm512_unpackhi_ps(c2, c3));
  // Per 128-bit lane: [c0's lane sum, c1's, c2's, c3's].
  const __m512d a = _mm512_castps_pd(h01), b = _mm512_castps_pd(h23);
  const __m512 g = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  // The four lanes added: lanes [0+2, 1+3, ...], then lane 0 = 0+2+1+3.
  const __m512 g2 = _mm512_add_ps(g, _mm512_shuffle_f32x4(g, g, _MM_SHUFFLE(1, 0, 3, 2)));
  const __m512 g4 = _mm512_add_ps(g2, _mm512_shuffle_f32x4(g2, g2, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_castps512_ps128(g4);
}

// out[r][c] = x_r . w_c over kc elements (plus out[r][c] when accumulate),
// R rows of x, C rows of w: R * 4 running sums of 16 lanes in registers (24
// of the 32 at 6 x 4), six loads of x and four of w per 24 FMAs.
template <int R, int C>
HILNAS_AVX512 void Tile(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t kc,
                        float* out, int64_t ldo, bool accumulate) {
  __m512 acc[R][kTileCols];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < kTileCols; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  int64_t p = 0;
  for (; p + 16 <= kc; p += 16) {
    __m512 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm512_loadu_ps(x + r * ldx + p);
    for (int c = 0; c < C; ++c) {
      const __m512 wv = _mm512_loadu_ps(w + c * ldw + p);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  if (p < kc) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (kc - p)) - 1);
    __m512 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm512_maskz_loadu_ps(mask, x + r * ldx + p);
    for (int c = 0; c < C; ++c) {
      const __m512 wv = _mm512_maskz_loadu_ps(mask, w + c * ldw + p);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    __m128 s = Sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    float* o = out + r * ldo;
    if (C == kTileCols) {
      if (accumulate) s = _mm_add_ps(s, _mm_loadu_ps(o));
      _mm_storeu_ps(o, s);
    } else {
      float sums[kTileCols];
      _mm_storeu_ps(sums, s);
      for (int c = 0; c < C; ++c) o[c] = accumulate ? o[c] + sums[c] : sums[c];
    }
  }
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t,
                        bool);

template <int R>
constexpr TileFn kRow[kTileCols] = {&Tile<R, 1>, &Tile<R, 2>, &Tile<R, 3>, &Tile<R, 4>};

constexpr const TileFn* kTiles[kTileRows] = {kRow<1>, kRow<2>, kRow<3>, kRow<4>, kRow<5>, kRow<6>};

// rows x kc elements of w (row stride ld) as f32 into out (row stride kc).
HILNAS_AVX512 void WidenBlock(const uint16_t* w, int64_t ld, int64_t rows, int64_t kc, bool bf16,
                              float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* src = w + r * ld;
    float* dst = out + r * kc;
    int64_t p = 0;
    uint16_t tail[16] = {};
    for (; p < kc; p += 16) {
      const uint16_t* from = src + p;
      if (p + 16 > kc) {
        std::memcpy(tail, from, static_cast<size_t>(kc - p) * sizeof(uint16_t));
        from = tail;
      }
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from));
      const __m512 f = bf16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                            : _mm512_cvtph_ps(h);
      if (p + 16 > kc) {
        _mm512_mask_storeu_ps(dst + p, static_cast<__mmask16>((1u << (kc - p)) - 1), f);
      } else {
        _mm512_storeu_ps(dst + p, f);
      }
    }
  }
}

// Output columns [n0, n1) of the product, on the calling thread.
void Columns(const float* x, const void* w, GemmWeights weights, int64_t m, int64_t n, int64_t k,
             int64_t n0, int64_t n1, float* out) {
  thread_local AlignedVector<float> widened;  // on a cache line, as the zmm loads want
  for (int64_t kb = 0; kb < k; kb += kKBlock) {
    const int64_t kc = std::min(kKBlock, k - kb);
    const int64_t block_rows =
        std::max<int64_t>(kTileCols, kBlockBytes / (kc * 4) / kTileCols * kTileCols);
    for (int64_t j0 = n0; j0 < n1; j0 += block_rows) {
      const int64_t rows = std::min(block_rows, n1 - j0);
      const float* wb;
      int64_t ldw;
      if (weights == GemmWeights::kF32) {
        wb = static_cast<const float*>(w) + j0 * k + kb;
        ldw = k;
      } else {
        if (static_cast<int64_t>(widened.size()) < rows * kc) {
          widened.resize(static_cast<size_t>(block_rows * kc));
        }
        WidenBlock(static_cast<const uint16_t*>(w) + j0 * k + kb, k, rows, kc,
                   weights == GemmWeights::kBF16, widened.data());
        wb = widened.data();
        ldw = kc;
      }
      for (int64_t i = 0; i < m; i += kTileRows) {
        const int64_t tr = std::min<int64_t>(kTileRows, m - i);
        for (int64_t j = 0; j < rows; j += kTileCols) {
          const int64_t tc = std::min<int64_t>(kTileCols, rows - j);
          kTiles[tr - 1][tc - 1](x + i * k + kb, k, wb + j * ldw, ldw, kc, out + i * n + j0 + j, n,
                                 kb > 0);
        }
      }
    }
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
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
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
  static const bool below = BlasCoreBelowCpu();
  return below;
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
  // Runs of output columns taken by whichever thread is free
  // (model/work_split.h), about two a thread, each 16 to 128 columns: a
  // multiple of the tile, and no wider than Columns' weight block at the
  // full kKBlock (kBlockBytes / (kKBlock * 4) = 128 rows), so a chunk's
  // weights stay in L2 as before.
  ParallelChunks(n, ChunkFor(n, at::get_num_threads(), 2, 16, 16, 128),
                 [&](int64_t c0, int64_t c1) { Columns(x, w, weights, m, n, k, c0, c1, out); });
  return true;
#else
  (void)x, (void)w, (void)weights, (void)out;
  return false;
#endif
}

}  // namespace hilnas
