#include "model/half_gemv.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
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

// Portable: eight running sums the compiler can vectorise.
void RowsPortable(const uint16_t* w, const float* x, float* y, int64_t in, int64_t first,
                  int64_t last, bool bf16) {
  for (int64_t o = first; o < last; ++o) {
    const uint16_t* row = w + o * in;
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

__attribute__((target("avx2,fma,f16c"))) void RowsAvx2(const uint16_t* w, const float* x, float* y,
                                                       int64_t in, int64_t first, int64_t last,
                                                       bool bf16) {
  for (int64_t o = first; o < last; ++o) {
    const uint16_t* row = w + o * in;
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
#endif

}  // namespace

torch::Tensor HalfWeightGemv(const torch::Tensor& w, const torch::Tensor& x) {
  TORCH_CHECK(w.dim() == 2 && w.is_contiguous(), "HalfWeightGemv: w must be a contiguous matrix");
  TORCH_CHECK(w.scalar_type() == torch::kBFloat16 || w.scalar_type() == torch::kHalf,
              "HalfWeightGemv: w must be bf16 or f16");
  const int64_t out = w.size(0), in = w.size(1);
  const torch::Tensor xc = x.reshape({in}).to(torch::kFloat).contiguous();
  torch::Tensor y = torch::empty({out}, xc.options());
  const auto* wp = reinterpret_cast<const uint16_t*>(w.data_ptr());
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool bf16 = w.scalar_type() == torch::kBFloat16;
  // A thread gets at least 2M weights (4 MiB): agents run OpenMP with a
  // passive wait policy, and waking a sleeping worker cost 60-110 us here,
  // more than splitting a smaller product saves (1536 x 512 f16: 37 us on
  // one thread, 95-150 us on two; 4096 x 1024: 305 us on one, 215 on two).
  const int64_t grain = std::max<int64_t>(16, (int64_t{1} << 21) / std::max<int64_t>(in, 1));
  at::parallel_for(0, out, grain, [&](int64_t first, int64_t last) {
#if defined(__x86_64__)
    if (HasAvx2()) return RowsAvx2(wp, xp, yp, in, first, last, bf16);
#endif
    RowsPortable(wp, xp, yp, in, first, last, bf16);
  });
  return y;
}

}  // namespace hilnas
