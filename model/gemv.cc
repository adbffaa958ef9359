#include "model/gemv.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/quant.h"
#include "model/work_split.h"
#include "util/aligned.h"
#include "util/cpu_features.h"
#include "util/median.h"

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

// The end of one row's product: the four accumulators summed pairwise,
// then across lanes, then the elements past the last whole vector. Every
// form below finishes each row here, after the same FMAs in the same
// order, so every form gives the same bits.
template <typename W>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline float FinishRow(
    __m256 a0, __m256 a1, __m256 a2, __m256 a3, const W* row, const float* x, int64_t i, int64_t in,
    bool bf16) {
  __m256 a = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  // Fused, one element at a time, in explicit instructions: as plain C++
  // the compiler may contract this loop into FMAs in one function and, in
  // another compiled for AVX-512, vectorise its products and add them in
  // order unfused (GCC's fold-left reductions), which changes the bits.
  for (; i < in; ++i) {
    s = _mm_fmadd_ss(_mm_set_ss(Widen1(row[i], bf16)), _mm_load_ss(x + i), s);
  }
  return _mm_cvtss_f32(s);
}

// One row at a time, front to back: the weights stream through memory as
// one sequential read, which every CPU's hardware prefetcher follows, and
// which is how llama.cpp's dot products read them too. Four accumulators
// keep four FMA chains in flight. With `prefetch`, each 32 elements also
// ask for the line 4 KiB ahead: the next page, where a hardware streamer
// that stops at page borders has not yet begun.
template <typename W, bool kPrefetch>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void RowsOneAtATime(
    const W* w, const float* x, float* y, int64_t in, int64_t first, int64_t last, bool bf16) {
  constexpr int64_t kAhead = 4096 / sizeof(W);  // elements
  for (int64_t o = first; o < last; ++o) {
    const W* row = w + o * in;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(),
           a3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= in; i += 32) {
      if (kPrefetch) {  // a prefetch past the matrix's end is harmless (it never faults)
        _mm_prefetch(reinterpret_cast<const char*>(row + i + kAhead), _MM_HINT_T0);
        if (sizeof(W) == 4) {
          _mm_prefetch(reinterpret_cast<const char*>(row + i + kAhead + 16), _MM_HINT_T0);
        }
      }
      a0 = _mm256_fmadd_ps(Widen(row + i, bf16), _mm256_loadu_ps(x + i), a0);
      a1 = _mm256_fmadd_ps(Widen(row + i + 8, bf16), _mm256_loadu_ps(x + i + 8), a1);
      a2 = _mm256_fmadd_ps(Widen(row + i + 16, bf16), _mm256_loadu_ps(x + i + 16), a2);
      a3 = _mm256_fmadd_ps(Widen(row + i + 24, bf16), _mm256_loadu_ps(x + i + 24), a3);
    }
    for (; i + 8 <= in; i += 8) {
      a0 = _mm256_fmadd_ps(Widen(row + i, bf16), _mm256_loadu_ps(x + i), a0);
    }
    y[o] = FinishRow(a0, a1, a2, a3, row, x, i, in, bf16);
  }
}

// R rows side by side, each load of x shared by the R rows: R streams `in`
// elements apart, which keeps more of the memory's misses in flight on a
// core whose prefetchers follow several streams better than one (llama.cpp's
// f32 products on x86 read 5 rows so, tinyBLAS's 5x1 tile). Each row keeps
// its own four accumulators, fed in the one-row order: the same bits. Four
// rows take 16 accumulators and 4 loads of x, more than AVX2's 16 registers:
// that form is compiled for AVX-512VL's 32 (RowsFourAvx512vl).
template <int R, typename W>
__attribute__((target("avx2,fma,f16c"), always_inline)) inline void RowsSideBySide(
    const W* w, const float* x, float* y, int64_t in, int64_t first, int64_t last, bool bf16) {
  int64_t o = first;
  for (; o + R <= last; o += R) {
    const W* row = w + o * in;
    __m256 a[R][4];
    for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = a[r][2] = a[r][3] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= in; i += 32) {
      const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8),
                   x2 = _mm256_loadu_ps(x + i + 16), x3 = _mm256_loadu_ps(x + i + 24);
      for (int r = 0; r < R; ++r) {
        const W* p = row + r * in + i;
        a[r][0] = _mm256_fmadd_ps(Widen(p, bf16), x0, a[r][0]);
        a[r][1] = _mm256_fmadd_ps(Widen(p + 8, bf16), x1, a[r][1]);
        a[r][2] = _mm256_fmadd_ps(Widen(p + 16, bf16), x2, a[r][2]);
        a[r][3] = _mm256_fmadd_ps(Widen(p + 24, bf16), x3, a[r][3]);
      }
    }
    for (; i + 8 <= in; i += 8) {
      const __m256 x0 = _mm256_loadu_ps(x + i);
      for (int r = 0; r < R; ++r) {
        a[r][0] = _mm256_fmadd_ps(Widen(row + r * in + i, bf16), x0, a[r][0]);
      }
    }
    for (int r = 0; r < R; ++r) {
      y[o + r] = FinishRow(a[r][0], a[r][1], a[r][2], a[r][3], row + r * in, x, i, in, bf16);
    }
  }
  RowsOneAtATime<W, false>(w, x, y, in, o, last, bf16);  // the last rows short of R
}

template <typename W>
__attribute__((target("avx2,fma,f16c"))) void RowsAvx2(const W* w, const float* x, float* y,
                                                       int64_t in, int64_t first, int64_t last,
                                                       bool bf16, GemvForm form) {
  switch (form) {
    case GemvForm::kOneRowPrefetch:
      return RowsOneAtATime<W, true>(w, x, y, in, first, last, bf16);
    case GemvForm::kTwoRows:
      return RowsSideBySide<2>(w, x, y, in, first, last, bf16);
    default:
      return RowsOneAtATime<W, false>(w, x, y, in, first, last, bf16);
  }
}

template <typename W>
__attribute__((target("avx512f,avx512vl,avx2,fma,f16c"))) void RowsFourAvx512vl(
    const W* w, const float* x, float* y, int64_t in, int64_t first, int64_t last, bool bf16) {
  RowsSideBySide<4>(w, x, y, in, first, last, bf16);
}

// The CPU's features as the kernels may use them (util/cpu_features.h:
// HILNAS_CPU_FEATURES caps them).
bool HasAvx512vl() { return KernelCpuFeatures().avx512f && KernelCpuFeatures().avx512vl; }

bool HasAvx2() { return KernelCpuFeatures().Avx2FmaF16c(); }

__attribute__((target("avx2,fma,f16c"))) void WidenAvx2(const uint16_t* w, float* out, int64_t n,
                                                        bool bf16) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, Widen(w + i, bf16));
  for (; i < n; ++i) out[i] = Widen1(w[i], bf16);
}

__attribute__((target("avx2,fma,f16c"))) void NarrowAvx2(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) out[i] = c10::Half(x[i]).x;
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

// R rows side by side (R = 1: one row at a time, one sequential stream),
// four accumulators a row (four FMA chains in flight), each load of x
// shared by the R rows: the x86 forms' NEON twins, and like them each row's
// sums go in one order in every form (the tail fused, std::fma: FMADD), so
// every form gives the same bits. Four rows take 16 accumulators and 4
// loads of x, within aarch64's 32 vector registers. With kPrefetch (R = 1)
// each 16 elements also ask for the line 4 KiB ahead (PRFM).
template <int R, bool kPrefetch, typename W>
void RowsNeon(const W* w, const float* x, float* y, int64_t in, int64_t first, int64_t last,
              bool bf16) {
  int64_t o = first;
  for (; o + R <= last; o += R) {
    const W* row = w + o * in;
    float32x4_t a[R][4];
    for (int r = 0; r < R; ++r) a[r][0] = a[r][1] = a[r][2] = a[r][3] = vdupq_n_f32(0);
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
      if (kPrefetch) __builtin_prefetch(row + i + 4096 / sizeof(W));
      const float32x4_t x0 = vld1q_f32(x + i), x1 = vld1q_f32(x + i + 4), x2 = vld1q_f32(x + i + 8),
                        x3 = vld1q_f32(x + i + 12);
      for (int r = 0; r < R; ++r) {
        const W* p = row + r * in + i;
        a[r][0] = vfmaq_f32(a[r][0], Widen4(p, bf16), x0);
        a[r][1] = vfmaq_f32(a[r][1], Widen4(p + 4, bf16), x1);
        a[r][2] = vfmaq_f32(a[r][2], Widen4(p + 8, bf16), x2);
        a[r][3] = vfmaq_f32(a[r][3], Widen4(p + 12, bf16), x3);
      }
    }
    for (; i + 4 <= in; i += 4) {
      const float32x4_t x0 = vld1q_f32(x + i);
      for (int r = 0; r < R; ++r) a[r][0] = vfmaq_f32(a[r][0], Widen4(row + r * in + i, bf16), x0);
    }
    for (int r = 0; r < R; ++r) {
      float sum = vaddvq_f32(vaddq_f32(vaddq_f32(a[r][0], a[r][1]), vaddq_f32(a[r][2], a[r][3])));
      for (int64_t k = i; k < in; ++k) sum = std::fma(Widen1(row[r * in + k], bf16), x[k], sum);
      y[o + r] = sum;
    }
  }
  if (R > 1) RowsNeon<1, false>(w, x, y, in, o, last, bf16);  // the last rows short of R
}

template <typename W>
void RowsNeonForm(const W* w, const float* x, float* y, int64_t in, int64_t first, int64_t last,
                  bool bf16, GemvForm form) {
  switch (form) {
    case GemvForm::kOneRowPrefetch:
      return RowsNeon<1, true>(w, x, y, in, first, last, bf16);
    case GemvForm::kTwoRows:
      return RowsNeon<2, false>(w, x, y, in, first, last, bf16);
    case GemvForm::kFourRows:
      return RowsNeon<4, false>(w, x, y, in, first, last, bf16);
    default:
      return RowsNeon<1, false>(w, x, y, in, first, last, bf16);
  }
}

void WidenNeon(const uint16_t* w, float* out, int64_t n, bool bf16) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(out + i, Widen4(w + i, bf16));
  for (; i < n; ++i) out[i] = Widen1(w[i], bf16);
}

// FCVTN rounds as FPCR says: to nearest, ties to even, unless a program
// changed it.
void NarrowNeon(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1_u16(out + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; ++i) out[i] = c10::Half(x[i]).x;
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

// The form WeightGemvsInto runs (SetGemvForm, TuneGemvForm).
std::atomic<GemvForm> current_form{GemvForm::kOneRow};

template <typename W>
void Rows(const W* w, const float* x, float* y, int64_t in, int64_t first, int64_t last, bool bf16,
          KernelPath path, [[maybe_unused]] GemvForm form) {  // portable: one form
  if (path != KernelPath::kPortable) {
#if defined(__x86_64__)
    if (form == GemvForm::kFourRows && HasAvx512vl()) {
      return RowsFourAvx512vl(w, x, y, in, first, last, bf16);
    }
    if (HasAvx2()) return RowsAvx2(w, x, y, in, first, last, bf16, form);
#elif defined(__aarch64__)
    if (KernelCpuFeatures().neon) return RowsNeonForm(w, x, y, in, first, last, bf16, form);
#endif
  }
  RowsPortable(w, x, y, in, first, last, bf16);
}

}  // namespace

const char* GemvKernelName() {
#if defined(__x86_64__)
  if (HasAvx2()) return "avx2+fma+f16c";
#elif defined(__aarch64__)
  if (KernelCpuFeatures().neon) return "neon";
#endif
  return "portable";
}

namespace {

void GemvsInto(const GemvProduct* products, size_t n, const float* x, KernelPath path,
               GemvForm form) {
  TORCH_CHECK(n > 0 && n <= 8, "WeightGemv: 1 to 8 products at a time, not ", n);
  if (QuantTypeOf(*products[0].w)) return QuantGemvsInto(products, n, x, path);
  const torch::ScalarType type = products[0].w->scalar_type();
  const int64_t in = products[0].w->size(1);
  TORCH_CHECK(type == torch::kFloat || type == torch::kBFloat16 || type == torch::kHalf,
              "WeightGemv: w must be f32, bf16 or f16");
  int64_t rows[8];
  for (size_t m = 0; m < n; ++m) {
    const torch::Tensor& w = *products[m].w;
    TORCH_CHECK(w.dim() == 2 && w.is_contiguous() && w.size(1) == in && w.scalar_type() == type,
                "WeightGemv: matrices must be contiguous, of one type, with ", in, " columns");
    rows[m] = w.size(0);
  }
  const bool bf16 = type == torch::kBFloat16;
  ParallelForRowsOf({rows, n}, WeightGemvGrainRows(*products[0].w),
                    [&](size_t m, int64_t first, int64_t last) {
                      const void* base = products[m].w->data_ptr();
                      if (type == torch::kFloat) {
                        Rows(static_cast<const float*>(base), x, products[m].y, in, first, last,
                             bf16, path, form);
                      } else {
                        Rows(static_cast<const uint16_t*>(base), x, products[m].y, in, first, last,
                             bf16, path, form);
                      }
                    });
}

bool RunsHere(GemvForm form) {
  if (form == GemvForm::kOneRow) return true;
#if defined(__x86_64__)
  return HasAvx2() && (form != GemvForm::kFourRows || HasAvx512vl());
#elif defined(__aarch64__)
  return KernelCpuFeatures().neon;
#else
  return false;  // the portable loop
#endif
}

constexpr GemvForm kAllForms[] = {GemvForm::kOneRow, GemvForm::kOneRowPrefetch, GemvForm::kTwoRows,
                                  GemvForm::kFourRows};

}  // namespace

int64_t WeightGemvGrainRows(const torch::Tensor& w) {
  if (QuantTypeOf(w)) return QuantGemvGrainRows(QuantColumns(w));
  return std::max<int64_t>(16,
                           kGemvGrainBytes / (std::max<int64_t>(w.size(1), 1) * w.element_size()));
}

void WeightGemvsInto(const GemvProduct* products, size_t n, const float* x, KernelPath path) {
  RECORD_FUNCTION("hilnas::gemv", {});
  GemvsInto(products, n, x, path, current_form.load(std::memory_order_relaxed));
}

const char* GemvFormName(GemvForm form) {
  switch (form) {
    case GemvForm::kOneRow:
      return "one-row";
    case GemvForm::kOneRowPrefetch:
      return "one-row-prefetch";
    case GemvForm::kTwoRows:
      return "two-rows";
    case GemvForm::kFourRows:
      return "four-rows";
  }
  return "?";
}

absl::StatusOr<GemvForm> ParseGemvForm(absl::string_view name) {
  for (GemvForm f : kAllForms) {
    if (name == GemvFormName(f)) return f;
  }
  std::string names;
  for (GemvForm f : kAllForms) absl::StrAppend(&names, GemvFormName(f), ", ");
  return absl::InvalidArgumentError(
      absl::StrCat("GEMV form '", name, "' is none of ", names, "or auto"));
}

std::vector<GemvForm> GemvFormsHere() {
  std::vector<GemvForm> forms;
  for (GemvForm f : kAllForms) {
    if (RunsHere(f)) forms.push_back(f);
  }
  return forms;
}

void SetGemvForm(GemvForm form) {
  current_form.store(RunsHere(form) ? form : GemvForm::kOneRow, std::memory_order_relaxed);
}

GemvForm CurrentGemvForm() { return current_form.load(std::memory_order_relaxed); }

GemvForm ChooseGemvForm(const std::vector<GemvFormTime>& times) {
  double one_row = -1;
  const GemvFormTime* best = nullptr;
  for (const GemvFormTime& t : times) {
    if (t.form == GemvForm::kOneRow) one_row = t.median_ms;
    if (best == nullptr || t.median_ms < best->median_ms) best = &t;
  }
  if (best == nullptr || one_row < 0) return GemvForm::kOneRow;
  return best->median_ms < one_row * (1 - kGemvFormMargin) ? best->form : GemvForm::kOneRow;
}

std::string GemvTuning::Describe() const {
  std::string s = GemvFormName(chosen);
  if (times.empty()) {
    return s + (bytes == 0 ? " (no f32, bf16 or f16 matrix to time: nothing to choose)"
                           : " (the only form on this CPU)");
  }
  s += " (";
  for (const GemvFormTime& t : times) {
    absl::StrAppendFormat(&s, "%s %.3f ms, ", GemvFormName(t.form), t.median_ms);
  }
  absl::StrAppendFormat(&s, "medians of %d passes over %.1f MB)", passes, bytes / 1e6);
  return s;
}

GemvTuning TuneGemvForm(const std::vector<torch::Tensor>& matrices) {
  constexpr int64_t kMaxBytes = int64_t{512} << 20;
  GemvTuning tuning;
  std::vector<const torch::Tensor*> mats;
  int64_t in_max = 0, rows_max = 0;
  for (const torch::Tensor& w : matrices) {
    const torch::ScalarType t = w.scalar_type();
    if (w.dim() != 2 || !w.is_contiguous() || w.numel() == 0 ||
        (t != torch::kFloat && t != torch::kHalf && t != torch::kBFloat16)) {
      continue;
    }
    if (tuning.bytes >= kMaxBytes) break;
    mats.push_back(&w);
    tuning.bytes += w.nbytes();
    in_max = std::max(in_max, w.size(1));
    rows_max = std::max(rows_max, w.size(0));
  }
  const std::vector<GemvForm> forms = GemvFormsHere();
  if (forms.size() < 2 || mats.empty()) {
    SetGemvForm(GemvForm::kOneRow);
    return tuning;
  }
  AlignedVector<float> x(in_max, 0.01f), y(rows_max);
  auto pass = [&](GemvForm form) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const torch::Tensor* w : mats) {
      const GemvProduct p{w, y.data()};
      GemvsInto(&p, 1, x.data(), KernelPath::kBest, form);
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  const double first = pass(GemvForm::kOneRow);  // untimed: faults, caches, threads waking
  // About a quarter of a second in all: 25 passes of each form for full4
  // (1-3 ms a pass), 3 for a pass of tens of milliseconds.
  const double round_ms = std::max(first, 1e-3) * static_cast<double>(forms.size());
  tuning.passes = static_cast<int>(std::clamp(250.0 / round_ms, 3.0, 25.0));
  std::vector<std::vector<double>> ms(forms.size());
  for (int p = 0; p < tuning.passes; ++p) {
    for (size_t k = 0; k < forms.size(); ++k) {
      const size_t f = (p + k) % forms.size();  // each form leads in turn
      ms[f].push_back(pass(forms[f]));
    }
  }
  for (size_t f = 0; f < forms.size(); ++f) tuning.times.push_back({forms[f], Median(ms[f])});
  tuning.chosen = ChooseGemvForm(tuning.times);
  SetGemvForm(tuning.chosen);
  return tuning;
}

std::vector<torch::Tensor> WeightGemvs(const std::vector<torch::Tensor>& ws, const torch::Tensor& x,
                                       KernelPath path) {
  TORCH_CHECK(!ws.empty() && ws.size() <= 8, "WeightGemvs: 1 to 8 matrices, not ", ws.size());
  const int64_t in = QuantTypeOf(ws[0]) ? QuantColumns(ws[0]) : ws[0].size(1);
  const torch::Tensor xc = x.reshape({in}).to(torch::kFloat).contiguous();
  std::vector<torch::Tensor> ys;
  std::vector<GemvProduct> products;
  for (const torch::Tensor& w : ws) {
    ys.push_back(torch::empty({QuantRows(w)}, xc.options()));
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
  if (KernelCpuFeatures().neon) return WidenNeon(src, out, n, bf16);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = Widen1(src[i], bf16);
}

void NarrowToHalves(const float* src, int64_t n, uint16_t* out) {
#if defined(__x86_64__)
  if (HasAvx2()) return NarrowAvx2(src, out, n);
#elif defined(__aarch64__)
  if (KernelCpuFeatures().neon) return NarrowNeon(src, out, n);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = c10::Half(src[i]).x;
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
