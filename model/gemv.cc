#include "model/gemv.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "model/quant.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace hilnas {
namespace {

// One stored weight as f32: bf16 widens by a shift, f16 through c10.
inline float Widen1(uint16_t h, bool bf16) {
  if (!bf16) return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline float Widen1(float f, bool) { return f; }

// Portable: eight running sums the compiler can vectorise.
template <typename W>
void RowsPortable(const W* w, const float* x, float* y, int64_t in, int64_t first, int64_t last,
                  bool bf16) {
  for (int64_t o = first; o < last; ++o) {
    const W* row = w + o * in;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= in; i += 8) {
      for (int k = 0; k < 8; ++k) {
        acc[k] += Widen1(row[i + k], bf16) * x[i + k];
      }
    }
    float sum = 0;
    for (float a : acc) sum += a;
    for (; i < in; ++i) {
      sum += Widen1(row[i], bf16) * x[i];
    }
    y[o] = sum;
  }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) inline __m256 Widen(const uint16_t* p, bool bf16) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}
__attribute__((target("avx2,fma,f16c"))) inline __m256 Widen(const float* p, bool) {
  return _mm256_loadu_ps(p);
}

// One row at a time, front to back: the weights stream through memory as
// one sequential read, which every CPU's hardware prefetcher follows, and
// which is how llama.cpp's dot products read them too. Four rows side by
// side (sharing each load of x; the earlier form, tuned on a Xeon) read four
// streams 2-6 KiB apart: on an AMD EPYC (Zen 4) 2.1-2.7x slower than one
// stream over the same bytes (10-20 against 25-28 GB/s, 56 MiB of f32 or f16
// rows of 512 and 1536, one thread; bench/data/runtime-compare.md). Four
// accumulators keep four FMA chains in flight; no software prefetch.
template <typename W>
__attribute__((target("avx2,fma,f16c"))) void RowsAvx2(const W* w, const float* x, float* y,
                                                       int64_t in, int64_t first, int64_t last,
                                                       bool bf16) {
  for (int64_t o = first; o < last; ++o) {
    const W* row = w + o * in;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
           a3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= in; i += 32) {
      a0 = _mm256_fmadd_ps(Widen(row + i, bf16), _mm256_loadu_ps(x + i), a0);
      a1 = _mm256_fmadd_ps(Widen(row + i + 8, bf16), _mm256_loadu_ps(x + i + 8), a1);
      a2 = _mm256_fmadd_ps(Widen(row + i + 16, bf16), _mm256_loadu_ps(x + i + 16), a2);
      a3 = _mm256_fmadd_ps(Widen(row + i + 24, bf16), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= in; i += 8) {
      a0 = _mm256_fmadd_ps(Widen(row + i, bf16), _mm256_loadu_ps(x + i), a0);
    }
    __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    float sum = _mm_cvtss_f32(s);
    for (; i < in; ++i) {
      sum += Widen1(row[i], bf16) * x[i];
    }
    y[o] = sum;
  }
}

bool HasAvx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                         __builtin_cpu_supports("f16c");
  return ok;
}

__attribute__((target("avx2,fma,f16c"))) void WidenAvx2(const uint16_t* w, float* out, int64_t n,
                                                        bool bf16) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Widen(w + i, bf16));
  for (; i < n; ++i) out[i] = Widen1(w[i], bf16);
}
#endif

#if defined(__aarch64__)
// NEON (every aarch64 CPU has it; Advanced SIMD is part of the base
// architecture): f16 widens with FCVTL, bf16 by a long shift; f32 loads.
inline float32x4_t Widen4(const float* p, bool) { return vld1q_f32(p); }
inline float32x4_t Widen4(const uint16_t* p, bool bf16) {
  const uint16x4_t h = vld1_u16(p);
  if (bf16) return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
  return vcvt_f32_f16(vreinterpret_f16_u16(h));
}

// One row at a time, as on x86 (one sequential stream), with four
// accumulators (four FMA chains in flight).
template <typename W>
void RowsNeon(const W* w, const float* x, float* y, int64_t in, int64_t first, int64_t last,
              bool bf16) {
  for (int64_t o = first; o < last; ++o) {
    const W* row = w + o * in;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0), a2 = vdupq_n_f32(0), a3 = vdupq_n_f32(0);
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
      a0 = vfmaq_f32(a0, Widen4(row + i, bf16), vld1q_f32(x + i));
      a1 = vfmaq_f32(a1, Widen4(row + i + 4, bf16), vld1q_f32(x + i + 4));
      a2 = vfmaq_f32(a2, Widen4(row + i + 8, bf16), vld1q_f32(x + i + 8));
      a3 = vfmaq_f32(a3, Widen4(row + i + 12, bf16), vld1q_f32(x + i + 12));
    }
    for (; i + 4 <= in; i += 4) a0 = vfmaq_f32(a0, Widen4(row + i, bf16), vld1q_f32(x + i));
    float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
    for (; i < in; ++i) sum += Widen1(row[i], bf16) * x[i];
    y[o] = sum;
  }
}

void WidenNeon(const uint16_t* w, float* out, int64_t n, bool bf16) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, Widen4(w + i, bf16));
  for (; i < n; ++i) out[i] = Widen1(w[i], bf16);
}
#endif

// A thread takes at least this many weight bytes. With OpenMP workers that
// spin briefly before sleeping (tools/common.cc sets GOMP_SPINCOUNT), a
// decode step's products follow each other closely enough that splitting
// 256 KiB pays: full4 (d 512, f 1536) f16 decode on 2 threads, 1.37 ->
// 0.88 ms/token against 4 MiB; 64 KiB was no better. Without the spin (a
// purely passive policy) every split waited 60-110 us for a sleeping
// worker and no split paid.
constexpr int64_t kGemvGrainBytes = int64_t{256} << 10;

template <typename W>
void Rows(const W* w, const float* x, float* y, int64_t in, int64_t first, int64_t last, bool bf16,
          KernelPath path) {
  if (path != KernelPath::kPortable) {
#if defined(__x86_64__)
    if (HasAvx2()) return RowsAvx2(w, x, y, in, first, last, bf16);
#elif defined(__aarch64__)
    return RowsNeon(w, x, y, in, first, last, bf16);
#endif
  }
  RowsPortable(w, x, y, in, first, last, bf16);
}

}  // namespace

const char* GemvKernelName() {
#if defined(__x86_64__)
  if (HasAvx2()) return "avx2+fma+f16c";
#elif defined(__aarch64__)
  return "neon";
#endif
  return "portable";
}

void WeightGemvsInto(const GemvProduct* products, size_t n, const float* x, KernelPath path) {
  RECORD_FUNCTION("hilnas::gemv", {});
  TORCH_CHECK(n > 0 && n <= 8, "WeightGemv: 1 to 8 products at a time, not ", n);
  if (QuantTypeOf(*products[0].w)) return QuantGemvsInto(products, n, x, path);
  const torch::ScalarType type = products[0].w->scalar_type();
  const int64_t in = products[0].w->size(1);
  TORCH_CHECK(type == torch::kFloat || type == torch::kBFloat16 || type == torch::kHalf,
              "WeightGemv: w must be f32, bf16 or f16");
  int64_t row_end[8];  // matrix m owns rows [row_end[m - 1], row_end[m]) of the whole
  int64_t rows = 0;
  for (size_t m = 0; m < n; ++m) {
    const torch::Tensor& w = *products[m].w;
    TORCH_CHECK(w.dim() == 2 && w.is_contiguous() && w.size(1) == in && w.scalar_type() == type,
                "WeightGemv: matrices must be contiguous, of one type, with ", in, " columns");
    rows += w.size(0);
    row_end[m] = rows;
  }
  const bool bf16 = type == torch::kBFloat16;
  const int64_t grain = std::max<int64_t>(
      16, kGemvGrainBytes / (std::max<int64_t>(in, 1) * products[0].w->element_size()));
  at::parallel_for(0, rows, grain, [&](int64_t first, int64_t last) {
    int64_t begin = 0;
    for (size_t m = 0; m < n; begin = row_end[m++]) {
      const int64_t lo = std::max(first, begin), hi = std::min(last, row_end[m]);
      if (lo >= hi) continue;
      const void* base = products[m].w->data_ptr();
      if (type == torch::kFloat) {
        Rows(static_cast<const float*>(base), x, products[m].y, in, lo - begin, hi - begin, bf16,
             path);
      } else {
        Rows(static_cast<const uint16_t*>(base), x, products[m].y, in, lo - begin, hi - begin, bf16,
             path);
      }
    }
  });
}

std::vector<torch::Tensor> WeightGemvs(const std::vector<torch::Tensor>& ws, const torch::Tensor& x,
                                       KernelPath path) {
  TORCH_CHECK(!ws.empty() && ws.size() <= 8, "WeightGemvs: 1 to 8 matrices, not ", ws.size());
  const int64_t in = QuantTypeOf(ws[0]) ? QuantColumns(ws[0]) : ws[0].size(1);
  const torch::Tensor xc = x.reshape({in}).to(torch::kFloat).contiguous();
  std::vector<torch::Tensor> ys;
  std::vector<GemvProduct> products;
  for (const torch::Tensor& w : ws) {
    ys.push_back(torch::empty({w.size(0)}, xc.options()));
    products.push_back({&w, ys.back().data_ptr<float>()});
  }
  WeightGemvsInto(products.data(), products.size(), xc.data_ptr<float>(), path);
  return ys;
}

torch::Tensor WeightGemv(const torch::Tensor& w, const torch::Tensor& x) {
  return WeightGemvs({w}, x)[0];
}

void WidenHalves(const uint16_t* src, int64_t n, bool bf16, float* out) {
#if defined(__x86_64__)
  if (HasAvx2()) return WidenAvx2(src, out, n, bf16);
#elif defined(__aarch64__)
  return WidenNeon(src, out, n, bf16);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = Widen1(src[i], bf16);
}

void WidenInto(const torch::Tensor& w, float* out) {
  TORCH_CHECK(
      w.is_contiguous() && (w.scalar_type() == torch::kHalf || w.scalar_type() == torch::kBFloat16),
      "WidenInto: a contiguous f16 or bf16 tensor, not ", w.scalar_type());
  const bool bf16 = w.scalar_type() == torch::kBFloat16;
  const auto* src = static_cast<const uint16_t*>(w.data_ptr());
  // As the products split: at least kGemvGrainBytes of weights a thread.
  at::parallel_for(0, w.numel(), kGemvGrainBytes / 2, [&](int64_t first, int64_t last) {
    WidenHalves(src + first, last - first, bf16, out + first);
  });
}

}  // namespace hilnas
