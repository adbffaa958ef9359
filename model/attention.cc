#include "model/attention.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/gemv.h"
#include "model/quant.h"
#include "model/work_split.h"
#include "util/aligned.h"
#include "util/cpu_features.h"
#include "util/median.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace hilnas {

torch::Tensor BlockedPositions(int64_t q_start, int64_t t, int64_t k_start, int64_t s,
                               int64_t window) {
  auto opts = torch::TensorOptions().dtype(torch::kLong);
  auto qpos = torch::arange(q_start, q_start + t, opts).view({t, 1});
  auto kpos = torch::arange(k_start, k_start + s, opts).view({1, s});
  auto blocked = kpos > qpos;
  if (window > 0) blocked = blocked.logical_or(qpos - kpos >= window);
  return blocked;
}

torch::Tensor ReferenceProbabilities(const torch::Tensor& q, const torch::Tensor& k,
                                     int64_t q_start, int64_t k_start, int64_t window) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3);
  const int64_t kvh = k.size(1), s = k.size(2);
  auto qg = q.reshape({b, kvh, h / kvh, t, hd});
  auto scores = torch::matmul(qg, k.unsqueeze(2).transpose(-1, -2)) / std::sqrt(double(hd));
  // One query with every key at or before it and no window needs no mask.
  if (t > 1 || window > 0 || k_start + s - 1 > q_start) {
    scores = scores.masked_fill(BlockedPositions(q_start, t, k_start, s, window),
                                -std::numeric_limits<double>::infinity());
  }
  return torch::softmax(scores, -1);
}

torch::Tensor ReferenceAttention(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, int64_t q_start, int64_t k_start,
                                 int64_t window) {
  auto out = torch::matmul(ReferenceProbabilities(q, k, q_start, k_start, window),
                           v.unsqueeze(2));  // [B, KVH, G, T, hd]
  return out.reshape({q.size(0), q.size(1), q.size(2), q.size(3)});
}

namespace {

// The kernel in ATen operations, for dtypes other than float (the tests'
// double-precision reference runs, half-precision activations).
torch::Tensor AtenAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                            int64_t q_start, int64_t k_start, int64_t window, int64_t block) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3);
  const int64_t kvh = k.size(1), s = k.size(2), g = h / kvh;
  const int64_t k_end = k_start + s;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  if (t == 1) {
    // Decode: one query per head against the keys it may see, all KV heads
    // in one batched product ([B*KVH, G, hd] x [B*KVH, hd, S']): four ops,
    // each key and value read once, no mask (the range is exact).
    const int64_t p = q_start;
    const int64_t hi = std::min(p + 1, k_end);
    const int64_t lo = window > 0 ? std::max(k_start, p - window + 1) : k_start;
    const int64_t n = hi - lo;
    auto keys = k.narrow(2, lo - k_start, n).reshape({b * kvh, n, hd});
    auto values = v.narrow(2, lo - k_start, n).reshape({b * kvh, n, hd});
    auto qs = q.reshape({b * kvh, g, hd});
    auto probs = torch::softmax(torch::bmm(qs, keys.transpose(1, 2)).mul_(scale), -1);
    return torch::bmm(probs, values).view({b, h, 1, hd});
  }
  const int64_t bq = std::min(t, block);
  const int64_t n_qblocks = (t + bq - 1) / bq;
  const int64_t bk = block;
  torch::Tensor out = torch::empty({b, h, t, hd}, q.options());
  // Work items: (batch, KV head, query block), each writing its own slice.
  at::parallel_for(0, b * kvh * n_qblocks, 1, [&](int64_t first, int64_t last) {
    std::map<std::tuple<int64_t, int64_t, int64_t>, torch::Tensor> masks;
    for (int64_t item = first; item < last; ++item) {
      const int64_t bi = item / (kvh * n_qblocks), gi = (item / n_qblocks) % kvh,
                    qb = item % n_qblocks;
      const int64_t i0 = qb * bq, rows_q = std::min(bq, t - i0);
      const int64_t p0 = q_start + i0, p1 = p0 + rows_q;  // query positions [p0, p1)
      // The G query heads sharing this KV head, stacked: [G * rows_q, hd].
      torch::Tensor qs =
          q[bi].narrow(0, gi * g, g).narrow(1, i0, rows_q).reshape({g * rows_q, hd}) * scale;
      const torch::Tensor keys = k[bi][gi], values = v[bi][gi];  // [S, hd]
      // Keys any of these queries may see: causal above, window below.
      const int64_t hi = std::min(p1, k_end);
      const int64_t lo = window > 0 ? std::max(k_start, p0 - window + 1) : k_start;
      torch::Tensor m = torch::full({g * rows_q}, neg_inf, q.options());
      torch::Tensor l = torch::zeros({g * rows_q}, q.options());
      torch::Tensor acc = torch::zeros({g * rows_q, hd}, q.options());
      for (int64_t c0 = lo; c0 < hi; c0 += bk) {
        const int64_t cols = std::min(bk, hi - c0);
        const torch::Tensor kb = keys.narrow(0, c0 - k_start, cols);
        torch::Tensor sc = torch::mm(qs, kb.t());  // [G * rows_q, cols]
        // Mask only blocks that cross the diagonal or the window's edge.
        const bool crosses_diagonal = c0 + cols - 1 > p0;
        const bool crosses_window = window > 0 && p1 - 1 - c0 >= window;
        if (crosses_diagonal || crosses_window) {
          // The mask depends only on the block's shape and its offset from
          // the queries: made once per shape and offset, reused by every
          // query block of this work range.
          const std::tuple<int64_t, int64_t, int64_t> key{p0 - c0, rows_q, cols};
          auto it = masks.find(key);
          if (it == masks.end()) {
            it = masks.emplace(key, BlockedPositions(p0, rows_q, c0, cols, window)).first;
          }
          sc.view({g, rows_q, cols}).masked_fill_(it->second, neg_inf);
        }
        // Online softmax (Milakov & Gimelshein): rescale what was summed so
        // far to the new row maximum. Rows that saw only masked keys keep
        // maximum -inf; 0 stands in for it so exp() gives 0, not NaN.
        torch::Tensor m_new = torch::maximum(m, std::get<0>(sc.max(1)));
        torch::Tensor m_safe = m_new.masked_fill(m_new.isinf(), 0);
        torch::Tensor alpha = (m - m_safe).exp_();
        sc.sub_(m_safe.unsqueeze(1)).exp_();
        l.mul_(alpha).add_(sc.sum(1));
        acc.mul_(alpha.unsqueeze(1)).addmm_(sc, values.narrow(0, c0 - k_start, cols));
        m = m_new;
      }
      acc.div_(l.unsqueeze(1));
      out[bi].narrow(0, gi * g, g).narrow(1, i0, rows_q).copy_(acc.view({g, rows_q, hd}));
    }
  });
  return out;
}

// ---- The float kernel: raw loops, no ATen call per block. ----
//
// Per work item (batch, KV head, query block) the G query heads sharing the
// KV head are stacked into R = G * rows rows, so each key block is loaded
// once for all of them (grouped-query attention without repeated K/V). Per
// key block: S = Q K^T (4 x 16 register tiles over a transposed key block),
// each row's causal/window range soft-maxed online, O += P V. Per-block
// ATen operations cost 2-5 us each, which is what made a small-window layer
// cost far more than its few score blocks; BLAS is not called either, so
// the kernel's threads never meet OpenBLAS's own (nested, they oversubscribe
// the cores).

// The helpers are always inlined into AttendItemBody's two builds, so their
// vector returns never cross a call and GCC's ABI note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float V8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));

constexpr int64_t kRowTile = 4;   // query rows per register tile
constexpr int64_t kColTile = 16;  // keys (or head dims) per register tile

inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

__attribute__((always_inline)) inline V8 Load8(const float* p) {
  V8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

__attribute__((always_inline)) inline void Store8(float* p, V8 v) { std::memcpy(p, &v, sizeof v); }

__attribute__((always_inline)) inline float ToFloat(float x) { return x; }

// A half-precision KV cache's elements (IEEE f16 bits). Decode widens
// them eight at a time in registers (Load8Of: F16C's VCVTPH2PS, NEON's
// FCVTL); GCC 12 converts a vector of _Float16 one lane at a time (VPINSRW
// and a scalar VCVTPH2PS each), which made decode over an f16 cache 1.3x
// slower than over an f32 one. ToFloat widens one value (a Q8_0 block's
// scale, a row's tail).
struct NativeHalf {
  uint16_t bits;
};
#if defined(__aarch64__)
__attribute__((always_inline)) inline float ToFloat(NativeHalf h) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h.bits))), 0);
}
#else
__attribute__((always_inline)) inline float ToFloat(NativeHalf h) {
  _Float16 f;
  std::memcpy(&f, &h.bits, sizeof f);
  return static_cast<float>(f);
}
#endif

#if defined(__aarch64__)
// Two NEON registers as the eight lanes of a V8 (low lanes first).
__attribute__((always_inline)) inline V8 Join(float32x4_t lo, float32x4_t hi) {
  V8 v;
  std::memcpy(&v, &lo, sizeof lo);
  std::memcpy(reinterpret_cast<char*>(&v) + sizeof lo, &hi, sizeof hi);
  return v;
}
#endif

// Eight consecutive cache values as f32. kAvx2: inlined into the copy of
// the attention body compiled for AVX2 + FMA + F16C (AttendItemAvx2), so
// VCVTPH2PS straight from memory, written as inline assembly because the
// intrinsic may only be inlined through functions compiled for F16C, and
// the same body is also compiled for the baseline (GCC 12's vector
// conversion goes one lane at a time, see NativeHalf). arm64: two FCVTLs.
// Widening in registers lets decode read an f16 cache once, instead of
// widening each block into scratch and reading it back.
template <bool kAvx2>
__attribute__((always_inline)) inline V8 Load8Of(const float* p) {
  return Load8(p);
}

template <bool kAvx2>
__attribute__((always_inline)) inline V8 Load8Of(const NativeHalf* p) {
  V8 v;
#if defined(__x86_64__)
  if constexpr (kAvx2) {
    struct Eight {
      uint16_t bits[8];
    };
    asm("vcvtph2ps %1, %0" : "=x"(v) : "m"(*reinterpret_cast<const Eight*>(p)));
    return v;
  }
#elif defined(__aarch64__)
  return Join(vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(&p[0].bits))),
              vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(&p[4].bits))));
#endif
  for (int i = 0; i < 8; ++i) v[i] = ToFloat(p[i]);
  return v;
}

// Eight consecutive int8 (a Q8_0 block's quants) as f32. GCC 12 converts
// a vector of int8 one lane at a time (a shift and a scalar VCVTSI2SS
// each); the AVX2 copy sign-extends with VPMOVSXBD (inline assembly, as
// above), arm64 with two SXTLs.
template <bool kAvx2>
__attribute__((always_inline)) inline V8 Load8Of(const int8_t* q) {
#if defined(__x86_64__)
  if constexpr (kAvx2) {
    struct Eight {
      int8_t q[8];
    };
    I8 i;
    asm("vpmovsxbd %1, %0" : "=x"(i) : "m"(*reinterpret_cast<const Eight*>(q)));
    return __builtin_convertvector(i, V8);
  }
#elif defined(__aarch64__)
  const int16x8_t wide = vmovl_s8(vld1_s8(q));
  return Join(vcvtq_f32_s32(vmovl_s16(vget_low_s16(wide))),
              vcvtq_f32_s32(vmovl_s16(vget_high_s16(wide))));
#endif
  typedef int8_t C8 __attribute__((vector_size(8)));
  C8 c;
  std::memcpy(&c, q, sizeof c);
  return __builtin_convertvector(c, V8);
}

// A Q8_0 cache's row element (--kv-dtype q8_0): one block of 32 values,
// an f16 scale d and 32 int8 q (value j = d * q[j]), ggml's block_q8_0. A
// row of hd values is hd / 32 of them.
struct Q8Block {
  uint16_t d;
  int8_t qs[kQuantBlock];
};
static_assert(sizeof(Q8Block) == kQ8BlockBytes, "block_q8_0 is 34 bytes");

// Cache elements a row of hd values takes.
template <typename KV>
constexpr int64_t RowElements(int64_t hd) {
  return std::is_same_v<KV, Q8Block> ? hd / kQuantBlock : hd;
}

// `rows` cached rows of hd values as f32, row r at dst + r * dst_stride:
// copied, widened from f16, or dequantized from Q8_0 blocks (d * q, eight
// lanes at a time).
template <bool kAvx2, typename KV>
__attribute__((always_inline)) inline void WidenRows(const KV* src, int64_t rows, int64_t hd,
                                                     float* dst, int64_t dst_stride) {
  if constexpr (std::is_same_v<KV, NativeHalf>) {
    if (dst_stride == hd) return WidenHalves(&src->bits, rows * hd, /*bf16=*/false, dst);
    for (int64_t r = 0; r < rows; ++r) {
      WidenHalves(&src[r * hd].bits, hd, /*bf16=*/false, dst + r * dst_stride);
    }
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const KV* row = src + r * RowElements<KV>(hd);
    float* to = dst + r * dst_stride;
    if constexpr (std::is_same_v<KV, Q8Block>) {
      for (int64_t b = 0; b < hd / kQuantBlock; ++b) {
        const float d = ToFloat(NativeHalf{row[b].d});
        for (int j = 0; j < kQuantBlock; j += 8) {
          Store8(to + b * kQuantBlock + j, Load8Of<kAvx2>(row[b].qs + j) * d);
        }
      }
    } else {
      std::memcpy(to, row, hd * sizeof(float));
    }
  }
}

// {sum(a[0]), ..., sum(a[7])}: pairwise sums in three rounds (what AVX's
// hadd does, written with generic shuffles so the portable build has it).
__attribute__((always_inline)) inline V8 HorizontalSums(const V8 a[8]) {
  typedef int I8 __attribute__((vector_size(32)));
  auto pairs = [](V8 x, V8 y) {
    return __builtin_shuffle(x, y, I8{0, 2, 8, 10, 4, 6, 12, 14}) +
           __builtin_shuffle(x, y, I8{1, 3, 9, 11, 5, 7, 13, 15});
  };
  const V8 u0 = pairs(pairs(a[0], a[1]), pairs(a[2], a[3]));
  const V8 u1 = pairs(pairs(a[4], a[5]), pairs(a[6], a[7]));
  return __builtin_shuffle(u0, u1, I8{0, 1, 2, 3, 8, 9, 10, 11}) +
         __builtin_shuffle(u0, u1, I8{4, 5, 6, 7, 12, 13, 14, 15});
}

// exp() of eight lanes: Cephes' expf (range reduction by ln 2, degree-5
// polynomial, 2^n through the exponent bits); relative error ~1e-7, inputs
// clamped to [-87.3, 88.3] (the kernel passes s - max <= 0).
__attribute__((always_inline)) inline V8 Exp8(V8 x) {
  const V8 lo = V8{} - 87.3f, hi = V8{} + 88.3f;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  V8 n = x * 1.44269504088896341f;
  n = (n + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23)
  x = x - n * 0.693359375f - n * -2.12194440e-4f;
  V8 y = V8{} + 1.9875691500e-4f;
  y = y * x + 1.3981999507e-3f;
  y = y * x + 8.3334519073e-3f;
  y = y * x + 4.1665795894e-2f;
  y = y * x + 1.6666665459e-1f;
  y = y * x + 5.0000001201e-1f;
  y = y * x * x + x + 1.0f;
  const I8 bits = (__builtin_convertvector(n, I8) + 127) << 23;
  V8 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

// The register tile both products use: for the four rows i,
// o[i][0..16) = (accumulate ? o[i][0..16) : 0) + sum over k in [k0, k1) of
// x[i * xs + k] * y[k * ys + 0..16). Scores: x = queries (k over head
// dims), y = transposed keys. Values: x = probabilities (k over keys), y =
// value rows (f32, or f16 widened as they are read). Eight accumulators
// stay in registers.
template <bool kAvx2 = false, typename Y = float>
__attribute__((always_inline)) inline void Tile4x16(const float* x, int64_t xs, const Y* y,
                                                    int64_t ys, int64_t k0, int64_t k1, float* o,
                                                    int64_t os, bool accumulate,
                                                    int64_t prefetch = 0) {
  V8 a00{}, a01{}, a10{}, a11{}, a20{}, a21{}, a30{}, a31{};
  if (accumulate) {
    a00 = Load8(o);
    a01 = Load8(o + 8);
    a10 = Load8(o + os);
    a11 = Load8(o + os + 8);
    a20 = Load8(o + 2 * os);
    a21 = Load8(o + 2 * os + 8);
    a30 = Load8(o + 3 * os);
    a31 = Load8(o + 3 * os + 8);
  }
  for (int64_t k = k0; k < k1; ++k) {
    const V8 y0 = Load8Of<kAvx2>(y + k * ys), y1 = Load8Of<kAvx2>(y + k * ys + 8);
    if (prefetch != 0) __builtin_prefetch(y + k * ys + prefetch);
    const float x0 = x[k], x1 = x[xs + k], x2 = x[2 * xs + k], x3 = x[3 * xs + k];
    a00 += x0 * y0;
    a01 += x0 * y1;
    a10 += x1 * y0;
    a11 += x1 * y1;
    a20 += x2 * y0;
    a21 += x2 * y1;
    a30 += x3 * y0;
    a31 += x3 * y1;
  }
  Store8(o, a00);
  Store8(o + 8, a01);
  Store8(o + os, a10);
  Store8(o + os + 8, a11);
  Store8(o + 2 * os, a20);
  Store8(o + 2 * os + 8, a21);
  Store8(o + 3 * os, a30);
  Store8(o + 3 * os + 8, a31);
}

// Score and value work in multiply-adds below which one thread does it
// all, for a prompt's queries (BlockedAttention). Set when a split measured
// about a microsecond with the workers still spinning from the previous
// product (util/subprocess.h): a window-128 layer's decode (8 heads x 128
// keys x 64 x 2 = 131K) then went from 6.2 to 3.9 us on 2 threads.
constexpr double kParallelWork = 1e5;
// The same for one decode query (DecodeAttention), where a split has only
// the KV heads to share out: the default until TuneDecodeSplit measures the
// host's (attention.h), which is what the runtime then uses. On a Zen 5 VM
// (2026-11-28) a split over 2 threads cost 3.2 us even with the workers spinning (`attention_bench
// --split-cost 1`: an empty at::parallel_for; two items of 2.25 us took
// 5.55 us split, 4.49 in a row), so it pays above about 6.4 us of serial
// work, ~130K multiply-adds at this kernel's rate. A window-128 layer's
// decode (131K) split took 8.2-11.1 us against 5.2-5.3 on one thread;
// inside the model the split held a window layer's decode attention at
// 0.17x a full layer's on 2 threads (bench/window_pricing.sh; issue 35 asks
// <= 0.15x), and left on one thread it read 0.115-0.145x. A full layer's
// 256 keys (262K) and up still split.
constexpr double kDecodeParallelWork = 2e5;
// The process's threshold: kDecodeParallelWork until TuneDecodeSplit sets
// the host's (attention.h).
std::atomic<double> decode_split_work{kDecodeParallelWork};

// What one thread reuses across its items: no allocation per block.
// Cache-line aligned (util/aligned.h): with malloc's 16-byte alignment the
// tiles' 32-byte rows straddled lines or not as the heap happened to lie.
struct Scratch {
  AlignedVector<float> qs;    // [R_pad, hd_pad] scaled queries
  AlignedVector<float> vb;    // [bk, hd_pad] value block, when hd is not a tile multiple
  AlignedVector<uint8_t> qq;  // [R, hd / 32] scaled queries as Q8_0 blocks (a Q8_0 cache)
  AlignedVector<float> s;     // [R_pad, bk_pad] scores, then probabilities
  AlignedVector<float> acc;   // [R_pad, hd_pad] unnormalised outputs
  AlignedVector<float> m, l;  // [R_pad] running maxima and sums
};

// Where the queries, keys and values of one work item are.
struct Item {
  const float* q;       // row r: q + (r / rows) * q_head + (r % rows) * hd
  int64_t q_head;       // stride between stacked heads
  float* out;           // same layout as q
  const float* keys;    // [S, hd] at positions k_start..
  const float* values;  // [S, hd]
  const float* kt;      // the keys transposed, [hd_pad, kt_stride]; null for one query (T = 1)
  int64_t rows;         // queries per head in this block
  int64_t g;            // heads stacked
  int64_t p0;           // position of the first query
  // Instead of keys and values, a reduced-precision cache (decode only):
  // f16 bits read as NativeHalf, or Q8_0 blocks read as Q8Block.
  enum class Cache { kF32, kF16, kQ8_0 } cache = Cache::kF32;
  const void* keys_raw = nullptr;
  const void* values_raw = nullptr;
  // A prompt item's successor (FloatAttention): its queries, laid out
  // as q, fetched while this item's values are summed; null for none.
  const float* next_q = nullptr;
  int64_t next_rows = 0;
};

struct Shape {
  int64_t hd, k_start, k_end, window, bk;
  float scale;
  int64_t kt_stride;  // row stride of Item::kt: S rounded up to a tile, plus a tile (zeros)
};

// The helpers below are always inlined into AttendItemBody, and it into the
// two copies compiled for different instruction sets (AttendItemAvx2,
// AttendItemPortable): an out-of-line helper would be compiled for the
// baseline only and lose AVX2 + FMA in the hot loops.
#define HILNAS_INLINE __attribute__((always_inline)) inline

// Scaled queries into w.qs ([rp, hdp], zero padded); accumulators, maxima
// and sums reset.
HILNAS_INLINE void LoadQueries(const Item& it, const Shape& sh, int64_t hdp, int64_t rp,
                               Scratch& w) {
  const int64_t hd = sh.hd, r_all = it.g * it.rows;
  // Zeros only where the rows below write none: a window layer's item is
  // a few hundred multiply-adds a row, so a row's fixed costs show.
  if (hd == hdp && rp == r_all) {
    w.qs.resize(rp * hdp);
  } else {
    w.qs.assign(rp * hdp, 0.0f);
  }
  // A prompt's accumulators are written, not added to, by the item's first
  // key block (ValueProducts), which every row sees: zeros only for decode
  // (4 MB of them a 2048-token call, 0.18 ms on a Zen 4).
  if (it.rows == 1) {
    w.acc.assign(rp * hdp, 0.0f);
  } else {
    w.acc.resize(rp * hdp);
  }
  w.m.assign(rp, -std::numeric_limits<float>::infinity());
  w.l.assign(rp, 0.0f);
  for (int64_t r = 0; r < r_all; ++r) {
    const float* src = it.q + (r % it.g) * it.q_head + (r / it.g) * hd;
    for (int64_t d = 0; d < hd; ++d) w.qs[r * hdp + d] = src[d] * sh.scale;
  }
}

// One block of keys, [c0, c0 + cols), against all rows of an item; its
// scores live in rows of cp floats.
struct KeyBlock {
  const Item& it;
  const Shape& sh;
  int64_t r_all, c0, cols, cp;
  bool first;  // the item's first block: its value products start the outputs

  // The keys [a, b) of this block that row r sees: causal above, window
  // below.
  HILNAS_INLINE void RowRange(int64_t r, int64_t& a, int64_t& b) const {
    a = b = 0;
    if (r >= r_all) return;
    const int64_t p = it.p0 + r / it.g;
    const int64_t first = sh.window > 0 ? std::max(sh.k_start, p - sh.window + 1) : sh.k_start;
    a = std::clamp(first - c0, int64_t{0}, cols);
    b = std::clamp(p + 1 - c0, int64_t{0}, cols);
  }

  // The union over a row tile: a tile on the diagonal or a window's edge
  // skips the columns none of its rows sees.
  HILNAS_INLINE void TileRange(int64_t r, int64_t& ta, int64_t& tb) const {
    ta = cols;
    tb = 0;
    for (int64_t i = r; i < r + kRowTile; ++i) {
      int64_t a, b;
      RowRange(i, a, b);
      if (a < b) {
        ta = std::min(ta, a);
        tb = std::max(tb, b);
      }
    }
  }
};

// Asks for the cache lines of [p, p + bytes) ahead of their use.
HILNAS_INLINE void PrefetchLines(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off);
}

// What a decode step reads next, fetched while it scores a block: a decode
// step reads a layer's cache once, from wherever the tens of megabytes of
// weights streamed since the last step left it (L3 or memory), which the
// hardware's own prefetchers did not hide. `values`: this block's value
// rows (read after the softmax); `next_keys`: the next block's first
// `next_cols` key rows (none past the layer's keys). full4 at 2048 tokens
// over an f16 cache, 1 thread, Zen 5 (bench/step_profile, four rounds
// each, interleaved): decode attention 0.404-0.443 ms a step without,
// 0.300-0.323 with (bench/data/runtime-compare.md).
template <typename K>
struct DecodePrefetch {
  const K* values;
  const K* next_keys;
  int64_t next_cols;
};

// Decode scores: a handful of rows, dot products straight off the cache (f32,
// or f16 widened in registers), no transpose. Eight keys at a time, so one
// load of q serves eight products and their eight sums fold into one
// vector; the same eight rows of the block's values and of the next
// block's keys are prefetched meanwhile (DecodePrefetch).
template <bool kAvx2, typename K>
HILNAS_INLINE void DecodeScores(const KeyBlock& blk, const K* kb, const DecodePrefetch<K>& ahead,
                                int64_t hdp, const Scratch& w, float* s) {
  const int64_t hd = blk.sh.hd, cols = blk.cols, cp = blk.cp;
  const int64_t row_bytes = hd * static_cast<int64_t>(sizeof(K));
  int64_t c = 0;
  if (hd % 8 == 0) {
    for (; c + 8 <= cols; c += 8) {
      const K* key = kb + c * hd;
      PrefetchLines(ahead.values + c * hd, 8 * row_bytes);
      if (c < ahead.next_cols) {
        PrefetchLines(ahead.next_keys + c * hd,
                      std::min<int64_t>(8, ahead.next_cols - c) * row_bytes);
      }
      for (int64_t r = 0; r < blk.r_all; ++r) {
        const float* qr = w.qs.data() + r * hdp;
        V8 a[8] = {};
        for (int64_t d = 0; d < hd; d += 8) {
          const V8 qd = Load8(qr + d);
          for (int j = 0; j < 8; ++j) a[j] += qd * Load8Of<kAvx2>(key + j * hd + d);
        }
        Store8(s + r * cp + c, HorizontalSums(a));
      }
    }
  }
  for (; c < cols; ++c) {
    const K* key = kb + c * hd;
    for (int64_t r = 0; r < blk.r_all; ++r) {
      const float* qr = w.qs.data() + r * hdp;
      // One rounding a term for every cache type: GCC turns the f32 loop
      // into vector products and in-order sums (two roundings a term)
      // unless the multiply-add is spelled out.
      float sum = 0;
      for (int64_t d = 0; d < hd; ++d) sum = std::fma(qr[d], ToFloat(key[d]), sum);
      s[r * cp + c] = sum;
    }
  }
}

// Decode scores over a Q8_0 cache, as llama.cpp computes them: each scaled
// query row quantized to Q8_0 once (w.qq), then integer dot products with
// the cached key blocks (the weight kernels' Q8_0 x Q8_0 path; QuantGemm
// for several query rows, which unpacks each key block once for four).
HILNAS_INLINE void QuantDecodeScores(const KeyBlock& blk, const Q8Block* kb, const Scratch& w,
                                     float* s) {
  const int64_t blocks = blk.sh.hd / kQuantBlock;
  const uint8_t* keys = reinterpret_cast<const uint8_t*>(kb);
  if (blk.r_all == 1) {
    QuantRowsDot(QuantType::kQ8_0, keys, blocks, w.qq.data(), s, 0, blk.cols);
  } else {
    QuantGemm(QuantType::kQ8_0, keys, blocks, w.qq.data(), blk.r_all, s, blk.cp, 0, blk.cols);
  }
}

// Prefill scores: keys transposed once per call ([hd, S], see
// FloatAttention), column c of this block is column c0 - k_start + c there;
// 4 x 16 register tiles.
HILNAS_INLINE void PrefillScores(const KeyBlock& blk, int64_t hdp, int64_t rp, const Scratch& w,
                                 float* s) {
  const float* kt = blk.it.kt + (blk.c0 - blk.sh.k_start);
  for (int64_t r = 0; r < rp; r += kRowTile) {
    const float* q0 = w.qs.data() + r * hdp;
    int64_t ta, tb;
    blk.TileRange(r, ta, tb);
    for (int64_t c = ta; c < tb; c += kColTile) {
      // The next tile's line of each transposed key row (two tiles on,
      // as a tile starting off a line spans two), fetched meanwhile: a
      // window layer's row tiles each read their keys' 36 KB from L2.
      Tile4x16(q0, hdp, kt + c, blk.sh.kt_stride, 0, blk.sh.hd, s + r * blk.cp + c, blk.cp,
               /*accumulate=*/false, c + kColTile < tb ? 2 * kColTile : 0);
    }
  }
}

HILNAS_INLINE float RowMax(const float* row, int64_t a, int64_t b) {
  float mx = row[a];
  int64_t c = a;
  if (b - a >= 8) {
    V8 m8 = Load8(row + a);
    for (c = a + 8; c + 8 <= b; c += 8) {
      const V8 x = Load8(row + c);
      m8 = x > m8 ? x : m8;
    }
    for (int i = 0; i < 8; ++i) mx = std::max(mx, m8[i]);
  }
  for (; c < b; ++c) mx = std::max(mx, row[c]);
  return mx;
}

// row[a, b) = exp(row - m), everything else in the row 0; returns the sum.
HILNAS_INLINE float ExpRow(float* row, int64_t a, int64_t b, int64_t cp, float m) {
  std::fill(row, row + a, 0.0f);
  std::fill(row + b, row + cp, 0.0f);
  V8 sum8{};
  int64_t c = a;
  for (; c + 8 <= b; c += 8) {
    const V8 e = Exp8(Load8(row + c) - m);
    Store8(row + c, e);
    sum8 += e;
  }
  float sum = 0;
  for (int i = 0; i < 8; ++i) sum += sum8[i];
  for (; c < b; ++c) {
    row[c] = std::exp(row[c] - m);
    sum += row[c];
  }
  return sum;
}

// Online softmax (Milakov & Gimelshein) over each row's own key range [a, b)
// in this block: scores become probabilities, and the running maxima, sums
// and accumulated outputs are rescaled to the new maxima.
HILNAS_INLINE void SoftmaxBlock(const KeyBlock& blk, int64_t hdp, int64_t rp, Scratch& w,
                                float* s) {
  for (int64_t r = 0; r < rp; ++r) {
    float* row = s + r * blk.cp;
    int64_t a, b;
    blk.RowRange(r, a, b);
    if (a >= b) {
      std::fill(row, row + blk.cp, 0.0f);
      continue;
    }
    const float m_new = std::max(w.m[r], RowMax(row, a, b));
    if (w.m[r] == -std::numeric_limits<float>::infinity()) {
      // The row's first keys: nothing summed yet (l and acc are zeros), so
      // nothing to rescale. A window layer's rows have only this block.
      w.m[r] = m_new;
      w.l[r] = ExpRow(row, a, b, blk.cp, m_new);
      continue;
    }
    const float alpha = std::exp(w.m[r] - m_new);
    w.m[r] = m_new;
    w.l[r] = w.l[r] * alpha + ExpRow(row, a, b, blk.cp, m_new);
    if (alpha != 1.0f) {
      float* acc = w.acc.data() + r * hdp;
      for (int64_t d = 0; d < hdp; ++d) acc[d] *= alpha;
    }
  }
}

// O[0, d0 .. d0 + 8 NV) += sum over k in [k0, k1) of p[k] * v[k * vs + ..]:
// one query row (decode with as many KV heads as query heads), each value
// row read once across its dims, NV independent accumulators. Tile4x16
// with one live row spends three quarters of its multiply-adds on padding
// and chains each accumulator through every key.
template <int NV, bool kAvx2, typename V>
HILNAS_INLINE void OneRowValues(const float* p, const V* v, int64_t vs, int64_t k0, int64_t k1,
                                float* o) {
  V8 a[NV];
  for (int j = 0; j < NV; ++j) a[j] = Load8(o + 8 * j);
  for (int64_t k = k0; k < k1; ++k) {
    const float pk = p[k];
    for (int j = 0; j < NV; ++j) a[j] += pk * Load8Of<kAvx2>(v + k * vs + 8 * j);
  }
  for (int j = 0; j < NV; ++j) Store8(o + 8 * j, a[j]);
}

// O += P V over value rows of type V (f32, or f16 widened as they are
// read), row k at v + k * vs, 4 rows x 16 dims per register tile, or one
// row across its dims (OneRowValues).
template <bool kAvx2, typename V>
HILNAS_INLINE void ValueProducts(const KeyBlock& blk, const V* v, int64_t vs, int64_t hdp,
                                 int64_t rp, Scratch& w, const float* s) {
  if (blk.it.rows == 1) {
    // Decode: each query row on its own, each value row read once across
    // its dims (from L1 after the first row). Tiles of four rows walk the
    // block 16 dims at a time, a line of each value row per pass, and ran
    // 1.3-1.6x slower at 4 rows a KV head (full4 at 2048 tokens).
    for (int64_t r = 0; r < blk.r_all; ++r) {
      int64_t a, b;
      blk.RowRange(r, a, b);
      const float* p = s + r * blk.cp;
      for (int64_t d = 0; d < hdp && a < b; d += 64) {  // hdp is a multiple of 16
        float* o = w.acc.data() + r * hdp + d;
        switch (std::min<int64_t>(64, hdp - d) / 8) {
          case 2:
            OneRowValues<2, kAvx2>(p, v + d, vs, a, b, o);
            break;
          case 4:
            OneRowValues<4, kAvx2>(p, v + d, vs, a, b, o);
            break;
          case 6:
            OneRowValues<6, kAvx2>(p, v + d, vs, a, b, o);
            break;
          default:
            OneRowValues<8, kAvx2>(p, v + d, vs, a, b, o);
            break;
        }
      }
    }
    return;
  }
  const Item& it = blk.it;
  const bool fetch =  // on the item's last block of keys
      it.next_q != nullptr && blk.c0 + blk.cols >= std::min(it.p0 + it.rows, blk.sh.k_end);
  const int64_t row_bytes = blk.sh.hd * static_cast<int64_t>(sizeof(float));
  for (int64_t r = 0; r < rp; r += kRowTile) {
    if (fetch) {
      // This tile's rows of the output, written at the end, and the same
      // rows of the next item's queries, read at its start: a row each
      // tile, so the fetches spread over the item's work.
      for (int64_t i = r; i < std::min(r + kRowTile, blk.r_all); ++i) {
        const int64_t at = (i % it.g) * it.q_head + (i / it.g) * blk.sh.hd;
        for (int64_t off = 0; off < row_bytes; off += 64) {
          __builtin_prefetch(reinterpret_cast<const char*>(it.out + at) + off, 1, 2);
          if (i / it.g < it.next_rows) {
            __builtin_prefetch(reinterpret_cast<const char*>(it.next_q + at) + off, 0, 2);
          }
        }
      }
    }
    const float* p0 = s + r * blk.cp;
    int64_t ta, tb;
    blk.TileRange(r, ta, tb);
    if (blk.first && ta >= tb) {
      // No keys for these rows in the first block (none of the kernel's
      // callers does this): start them at zero.
      std::fill(w.acc.data() + r * hdp, w.acc.data() + (r + kRowTile) * hdp, 0.0f);
    }
    for (int64_t d = 0; d < hdp && ta < tb; d += kColTile) {
      Tile4x16<kAvx2>(p0, blk.cp, v + d, vs, ta, tb, w.acc.data() + r * hdp + d, hdp,
                      /*accumulate=*/!blk.first);
    }
  }
}

// O[0, 32 b0 .. 32 (b0 + NB)) += sum over k in [k0, k1) of p[k] * the
// value row k of a Q8_0 cache (rows of vs blocks), blocks b0.. of it
// dequantized in registers: each block's scale folds into p[k] once.
template <int NB, bool kAvx2>
HILNAS_INLINE void OneRowQ8Values(const float* p, const Q8Block* v, int64_t vs, int64_t b0,
                                  int64_t k0, int64_t k1, float* o) {
  constexpr int kPerBlock = kQuantBlock / 8;
  V8 a[NB * kPerBlock];
  for (int j = 0; j < NB * kPerBlock; ++j) a[j] = Load8(o + 8 * j);
  for (int64_t k = k0; k < k1; ++k) {
    for (int b = 0; b < NB; ++b) {
      const Q8Block& block = v[k * vs + b0 + b];
      const float pd = p[k] * ToFloat(NativeHalf{block.d});
      for (int i = 0; i < kPerBlock; ++i) {
        a[b * kPerBlock + i] += pd * Load8Of<kAvx2>(block.qs + 8 * i);
      }
    }
  }
  for (int j = 0; j < NB * kPerBlock; ++j) Store8(o + 8 * j, a[j]);
}

// OneRowQ8Values for R query rows over the same keys [k0, k1) (a decode
// call's rows of one KV head all see the same keys), NV of a block's four
// vectors of 8 dims from vector v0 on: each block's quants widened to
// floats once for the R rows, each row's sums in OneRowQ8Values' order
// (the same bits). R x NV accumulators, 8 of AVX2's 16 registers. Over
// full4's heads (4 query rows a KV head) at 2048 keys on a Zen 4
// (`attention_bench --decode-caches 1`, one thread, alternated runs): one
// row at a time 87.2-87.6 us a call, two rows x a block (R 2, NV 4)
// 74.7-75.5, four rows x half a block (R 4, NV 2) 77.6-77.7.
template <int R, int NV, bool kAvx2>
HILNAS_INLINE void RowsQ8Values(const float* p, int64_t p_stride, const Q8Block* v, int64_t vs,
                                int64_t b0, int v0, int64_t k0, int64_t k1, float* o,
                                int64_t o_stride) {
  V8 a[R][NV];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < NV; ++j) a[r][j] = Load8(o + r * o_stride + 8 * j);
  }
  for (int64_t k = k0; k < k1; ++k) {
    const Q8Block& block = v[k * vs + b0];
    const float d = ToFloat(NativeHalf{block.d});
    float pd[R];
    for (int r = 0; r < R; ++r) pd[r] = p[r * p_stride + k] * d;
    for (int j = 0; j < NV; ++j) {
      const V8 x = Load8Of<kAvx2>(block.qs + 8 * (v0 + j));
      for (int r = 0; r < R; ++r) a[r][j] += pd[r] * x;
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < NV; ++j) Store8(o + r * o_stride + 8 * j, a[r][j]);
  }
}

// O += P V: f32 and f16 rows read where they lie when hd is a tile
// multiple, Q8_0 rows dequantized as they are read by a decode step;
// otherwise copied, widened or dequantized into a block padded with zeros
// to the tile.
template <bool kAvx2, typename KV>
HILNAS_INLINE void AccumulateValues(const KeyBlock& blk, const KV* vb, int64_t hdp, int64_t rp,
                                    Scratch& w, const float* s) {
  const int64_t hd = blk.sh.hd;
  if constexpr (!std::is_same_v<KV, Q8Block>) {
    if (hd == hdp) return ValueProducts<kAvx2>(blk, vb, hd, hdp, rp, w, s);
  } else {
    if (blk.it.rows == 1) {
      const int64_t blocks = hd / kQuantBlock;
      // One position's rows (decode): every row's keys are the same.
      int64_t r = 0;
      for (; r + 2 <= blk.r_all; r += 2) {
        int64_t a, b;
        blk.RowRange(r, a, b);
        for (int64_t b0 = 0; b0 < blocks && a < b; ++b0) {
          float* o = w.acc.data() + r * hdp + b0 * kQuantBlock;
          RowsQ8Values<2, 4, kAvx2>(s + r * blk.cp, blk.cp, vb, blocks, b0, 0, a, b, o, hdp);
        }
      }
      for (; r < blk.r_all; ++r) {
        int64_t a, b;
        blk.RowRange(r, a, b);
        for (int64_t b0 = 0; b0 < blocks && a < b; b0 += 2) {
          float* o = w.acc.data() + r * hdp + b0 * kQuantBlock;
          if (blocks - b0 == 1) {
            OneRowQ8Values<1, kAvx2>(s + r * blk.cp, vb, blocks, b0, a, b, o);
          } else {
            OneRowQ8Values<2, kAvx2>(s + r * blk.cp, vb, blocks, b0, a, b, o);
          }
        }
      }
      return;
    }
  }
  if (hd != hdp) {
    w.vb.assign(blk.cols * hdp, 0.0f);
  } else {
    w.vb.resize(blk.cols * hdp);
  }
  WidenRows<kAvx2>(vb, blk.cols, hd, w.vb.data(), hdp);
  ValueProducts<kAvx2>(blk, w.vb.data(), hdp, hdp, rp, w, s);
}

// Flash-style attention of one item: blocks of bk keys, each scored,
// soft-maxed online and folded into the outputs.
template <typename KV, bool kAvx2>
HILNAS_INLINE void AttendItemBody(const Item& it, const Shape& sh, Scratch& w) {
  const KV* keys;
  const KV* values;
  if constexpr (std::is_same_v<KV, float>) {
    keys = it.keys;
    values = it.values;
  } else {
    keys = static_cast<const KV*>(it.keys_raw);
    values = static_cast<const KV*>(it.values_raw);
  }
  const int64_t hd = sh.hd, hdp = RoundUp(hd, kColTile), row = RowElements<KV>(hd);
  const int64_t r_all = it.g * it.rows, rp = RoundUp(r_all, kRowTile);
  LoadQueries(it, sh, hdp, rp, w);
  if constexpr (std::is_same_v<KV, Q8Block>) {
    const int64_t bytes = hd / kQuantBlock * kQ8BlockBytes;
    w.qq.resize(r_all * bytes);
    for (int64_t r = 0; r < r_all; ++r) {
      QuantizeActivationsFast(w.qs.data() + r * hdp, hd, w.qq.data() + r * bytes);
    }
  }
  // Keys any of these queries may see: causal above, window below.
  const int64_t hi = std::min(it.p0 + it.rows, sh.k_end);
  const int64_t lo = sh.window > 0 ? std::max(sh.k_start, it.p0 - sh.window + 1) : sh.k_start;
  const bool decode = it.rows == 1;
  for (int64_t c0 = lo; c0 < hi; c0 += sh.bk) {
    // A score tile starts where its rows' keys start, so its last one may
    // reach a tile past `cols`: the row has room for it (zeros).
    const int64_t cols = std::min(sh.bk, hi - c0);
    const KeyBlock blk{
        it, sh, r_all, c0, cols, RoundUp(cols, kColTile) + (decode ? 0 : kColTile), c0 == lo};
    w.s.resize(rp * blk.cp);
    float* s = w.s.data();
    const KV* kb = keys + (c0 - sh.k_start) * row;
    const KV* vb = values + (c0 - sh.k_start) * row;
    if constexpr (std::is_same_v<KV, Q8Block>) {
      QuantDecodeScores(blk, kb, w, s);
    } else if (decode) {
      const int64_t next_cols = std::min(sh.bk, hi - c0 - sh.bk);
      const DecodePrefetch<KV> ahead{vb, next_cols > 0 ? kb + sh.bk * row : nullptr, next_cols};
      DecodeScores<kAvx2>(blk, kb, ahead, hdp, w, s);
    } else {
      PrefillScores(blk, hdp, rp, w, s);
    }
    SoftmaxBlock(blk, hdp, rp, w, s);
    AccumulateValues<kAvx2>(blk, vb, hdp, rp, w, s);
  }
  for (int64_t r = 0; r < r_all; ++r) {
    float* dst = it.out + (r % it.g) * it.q_head + (r / it.g) * hd;
    const float inv = 1.0f / w.l[r];
    for (int64_t d = 0; d < hd; ++d) dst[d] = w.acc[r * hdp + d] * inv;
  }
}

#undef HILNAS_INLINE

// The body compiled twice: for AVX2 + FMA, picked at run time where the CPU
// has them, and for the build's baseline (arm64's NEON; old x86).
template <typename KV>
void AttendItemPortable(const Item& it, const Shape& sh, Scratch& w) {
  AttendItemBody<KV, false>(it, sh, w);
}

#if defined(__x86_64__)
template <typename KV>
__attribute__((target("avx2,fma,f16c"))) void AttendItemAvx2(const Item& it, const Shape& sh,
                                                             Scratch& w) {
  AttendItemBody<KV, true>(it, sh, w);
}
#endif

// One item with keys and values of type KV, on AVX2 + FMA where the CPU
// has them, else on the baseline build.
template <typename KV>
void AttendItemAs(const Item& it, const Shape& sh, Scratch& w) {
#if defined(__x86_64__)
  // The CPU's features as the kernels may use them (util/cpu_features.h).
  if (KernelCpuFeatures().Avx2FmaF16c()) return AttendItemAvx2<KV>(it, sh, w);
#endif
  AttendItemPortable<KV>(it, sh, w);
}

void AttendItem(const Item& it, const Shape& sh, Scratch& w) {
  switch (it.cache) {
    case Item::Cache::kF16:
      return AttendItemAs<NativeHalf>(it, sh, w);
    case Item::Cache::kQ8_0:
      return AttendItemAs<Q8Block>(it, sh, w);
    case Item::Cache::kF32:
      return AttendItemAs<float>(it, sh, w);
  }
}

// One KV head's keys, [s, hd] rows, as dst [hdp, stride]: dst[d][j] =
// keys[j][d], zeros past s and past hd, in 8 x 8 blocks (both sides' lines
// used whole). A window layer's prompt reads only window + 15 keys a query
// but needs every key transposed: torch's strided copy into a zeroed
// tensor took 0.4-1.2 ms of a 2048-token, window-128 call's 9-12 (Zen 4),
// and blocks moved one float at a time 0.47 ms (perf, attention_bench).
// Each block goes through eight registers of eight lanes, transposed by
// shuffles: AVX's unpack, shuffle and 128-bit permute in the AVX copy,
// NEON's on arm64, SSE's in the x86 baseline.
__attribute__((always_inline)) inline void TransposeKeysBody(const float* keys, int64_t s,
                                                             int64_t hd, float* dst, int64_t hdp,
                                                             int64_t stride) {
  constexpr int64_t kB = 8;
  const int64_t s8 = s / kB * kB, hd8 = hd / kB * kB;
  for (int64_t j0 = 0; j0 < s8; j0 += kB) {
    for (int64_t d0 = 0; d0 < hd8; d0 += kB) {
      const float* src = keys + j0 * hd + d0;
      float* to = dst + d0 * stride + j0;
      // Rows of keys j0..j0+7 in, rows of dims d0..d0+7 out.
      V8 r[kB], t[kB], u[kB];
      for (int i = 0; i < kB; ++i) r[i] = Load8(src + i * hd);
      for (int i = 0; i < kB; i += 2) {
        t[i] = __builtin_shuffle(r[i], r[i + 1], I8{0, 8, 1, 9, 4, 12, 5, 13});
        t[i + 1] = __builtin_shuffle(r[i], r[i + 1], I8{2, 10, 3, 11, 6, 14, 7, 15});
      }
      for (int i = 0; i < kB; i += 4) {
        u[i] = __builtin_shuffle(t[i], t[i + 2], I8{0, 1, 8, 9, 4, 5, 12, 13});
        u[i + 1] = __builtin_shuffle(t[i], t[i + 2], I8{2, 3, 10, 11, 6, 7, 14, 15});
        u[i + 2] = __builtin_shuffle(t[i + 1], t[i + 3], I8{0, 1, 8, 9, 4, 5, 12, 13});
        u[i + 3] = __builtin_shuffle(t[i + 1], t[i + 3], I8{2, 3, 10, 11, 6, 7, 14, 15});
      }
      for (int i = 0; i < 4; ++i) {
        Store8(to + i * stride, __builtin_shuffle(u[i], u[i + 4], I8{0, 1, 2, 3, 8, 9, 10, 11}));
        Store8(to + (i + 4) * stride,
               __builtin_shuffle(u[i], u[i + 4], I8{4, 5, 6, 7, 12, 13, 14, 15}));
      }
    }
  }
  // The edges: keys past the last block of eight, dims past the last eight.
  for (int64_t d = 0; d < hd; ++d) {
    const int64_t from = d < hd8 ? s8 : 0;
    for (int64_t j = from; j < s; ++j) dst[d * stride + j] = keys[j * hd + d];
    std::fill(dst + d * stride + s, dst + (d + 1) * stride, 0.0f);
  }
  std::fill(dst + hd * stride, dst + hdp * stride, 0.0f);
}

#if defined(__x86_64__)
__attribute__((target("avx"))) void TransposeKeysAvx(const float* keys, int64_t s, int64_t hd,
                                                     float* dst, int64_t hdp, int64_t stride) {
  TransposeKeysBody(keys, s, hd, dst, hdp, stride);
}
#endif

void TransposeKeys(const float* keys, int64_t s, int64_t hd, float* dst, int64_t hdp,
                   int64_t stride) {
#if defined(__x86_64__)
  if (KernelCpuFeatures().avx) return TransposeKeysAvx(keys, s, hd, dst, hdp, stride);
#endif
  TransposeKeysBody(keys, s, hd, dst, hdp, stride);
}

torch::Tensor FloatAttention(const torch::Tensor& q_in, const torch::Tensor& k_in,
                             const torch::Tensor& v_in, int64_t q_start, int64_t k_start,
                             int64_t window, int64_t block) {
  const torch::Tensor q = q_in.contiguous();
  // Keys and values may be a narrowed cache: each head's rows must be
  // contiguous, the heads themselves may be strided.
  auto rows_contiguous = [](const torch::Tensor& x) {
    return x.stride(3) == 1 && x.stride(2) == x.size(3) ? x : x.contiguous();
  };
  const torch::Tensor k = rows_contiguous(k_in), v = rows_contiguous(v_in);
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3);
  const int64_t kvh = k.size(1), s = k.size(2), g = h / kvh;
  // Query rows per item: a window layer takes blocks a fraction of its
  // window high, so the keys an item reads (window + block - 1) stay close
  // to the window; every key block then holds the whole range. A quarter:
  // each row tile computes only its own position's keys (TileRange), so a
  // taller block costs no wasted products, and its fixed costs spread over
  // more rows. Window 128 at 2048 tokens (`attention_bench --prompts 2048`,
  // Zen 4, alternated runs): an eighth (16 rows) 7.67-7.76 ms on 1 thread,
  // a quarter 7.53-7.55, a half the same; on 2 threads, the window's share
  // of a full layer's 0.141-0.153 against 0.133-0.139.
  int64_t bq = std::min(t, block), bk = block;
  if (window > 0) {
    bq = std::min(t, std::max<int64_t>(8, std::min(block, window / 4)));
    bk = std::max(block, window + bq - 1);
  }
  const int64_t n_qblocks = (t + bq - 1) / bq;
  torch::Tensor out = torch::empty({b, h, t, hd}, q.options());
  const int64_t hdp = RoundUp(hd, kColTile), kt_stride = RoundUp(s, kColTile) + kColTile;
  const Shape shape{hd,       k_start, k_start + s,
                    window,   bk,      static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))),
                    kt_stride};
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // Prefill reads each key block from several query blocks: transpose each
  // KV head's keys once ([hd_pad, S_pad], zero-padded) instead of per item.
  torch::Tensor kt_all;
  const float* ktp = nullptr;
  // Its time is the attention's own (hilnas::attention or
  // hilnas::attention_window), as a layer's share of a prompt counts it.
  if (t > 1) {
    kt_all = torch::empty({b * kvh, hdp, kt_stride}, q.options());
    float* dst = kt_all.data_ptr<float>();
    const float* src = k.data_ptr<float>();
    auto transpose = [&](int64_t first, int64_t last) {
      for (int64_t head = first; head < last; ++head) {
        TransposeKeys(src + (head / kvh) * k.stride(0) + (head % kvh) * k.stride(1), s, hd,
                      dst + head * hdp * kt_stride, hdp, kt_stride);
      }
    };
    if (static_cast<double>(b * kvh) * s * hd < kParallelWork) {
      transpose(0, b * kvh);
    } else {
      ParallelChunks(b * kvh, 1, transpose);
    }
    ktp = dst;
  }
  // Items from the last query block down: under a causal mask the later
  // blocks see the most keys, and ParallelChunks hands the first items out
  // first, so the small ones fill in at the end.
  const int64_t heads = b * kvh, items = heads * n_qblocks;
  // Item `item`: its batch row, KV head and query block.
  auto item_at = [&](int64_t item) {
    const int64_t bi = (item % heads) / kvh, gi = item % kvh, qb = n_qblocks - 1 - item / heads;
    const int64_t i0 = qb * bq;
    const int64_t head0 = (bi * h + gi * g) * t * hd + i0 * hd;
    return Item{qp + head0,
                t * hd,
                op + head0,
                kp + bi * k.stride(0) + gi * k.stride(1),
                vp + bi * v.stride(0) + gi * v.stride(1),
                ktp == nullptr ? nullptr : ktp + (bi * kvh + gi) * hdp * kt_stride,
                std::min(bq, t - i0),
                g,
                q_start + i0};
  };
  auto run = [&](int64_t first, int64_t last) {
    thread_local Scratch scratch;
    for (int64_t item = first; item < last; ++item) {
      Item it = item_at(item);
      // A window layer's rows (128 keys each) waited a tenth of their time
      // for their queries and output lines, read and written once a call:
      // the item fetches the next item's queries and its own output lines
      // as it sums its values (ValueProducts).
      if (t > 1 && item + 1 < items) {
        const Item next = item_at(item + 1);
        it.next_q = next.q;
        it.next_rows = next.rows;
      }
      AttendItem(it, shape, scratch);
    }
  };
  const int64_t keys_read =
      window > 0 ? std::min(s, window + bq - 1) : std::min(s, q_start + t - k_start);
  const double work = 2.0 * static_cast<double>(b * h * t) * keys_read * hd;
  if (work < kParallelWork || items == 1) {
    run(0, items);
  } else {
    ParallelChunks(items, 1, run);
  }
  return out;
}

}  // namespace

namespace {

// Folds one KV head's chunks of a decode call into its outputs: for each
// of its g query rows, the chunks' outputs (each normalised by its own sum
// l_c, with its own maximum m_c) weighted by l_c exp(m_c - M) / sum of the
// same, M the largest m_c, in chunk order (the same bits whichever thread
// folds them). `head` holds the head's chunks, `stride` floats apart, each
// g rows of hd outputs, then g pairs (m, l).
void CombineChunks(const float* head, int64_t chunks, int64_t stride, int64_t g, int64_t hd,
                   float* out) {
  float w[kDecodeItems];  // chunks <= kDecodeItems (DecodeChunkKeys)
  for (int64_t r = 0; r < g; ++r) {
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < chunks; ++c) m = std::max(m, head[c * stride + g * hd + 2 * r]);
    float sum = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      const float* ml = head + c * stride + g * hd + 2 * r;
      w[c] = ml[1] * std::exp(ml[0] - m);
      sum += w[c];
    }
    float* dst = out + r * hd;
    for (int64_t d = 0; d < hd; ++d) dst[d] = 0;
    // Products and sums, not std::fma: this is compiled for the baseline,
    // where std::fma is a call to libm's (2048 of them a 2048-key call at
    // full4's heads cost 5 us, 7% of the attention).
    for (int64_t c = 0; c < chunks; ++c) {
      const float wc = w[c] / sum;
      const float* o = head + c * stride + r * hd;
      for (int64_t d = 0; d < hd; ++d) dst[d] += wc * o[d];
    }
  }
}

// Keys a decode item scores, soft-maxes and sums at a time (Shape::bk); a
// chunk of a head's keys is whole blocks (DecodeChunkKeys).
constexpr int64_t kDecodeBlockKeys = 128;

// Profiler names (bench/step_profile): a window layer's attention is its own
// row, so bench/window_pricing.sh prices it against a full layer's in one
// process.
constexpr char kRecord[] = "hilnas::attention";
constexpr char kWindowRecord[] = "hilnas::attention_window";

template <typename KV>
void DecodeAttentionAs(const float* q, int64_t h, int64_t kvh, int64_t hd, const KV* keys,
                       const KV* values, int64_t head_stride, int64_t n, int64_t key_start,
                       int64_t position, float* out, bool window_layer) {
  RECORD_FUNCTION(window_layer ? kWindowRecord : kRecord, {});
  const int64_t g = h / kvh;
  const int64_t chunk_keys = DecodeChunkKeys(n, kvh);
  const int64_t chunks = (n - 1) / chunk_keys + 1, items = kvh * chunks;
  const int64_t row = RowElements<KV>(hd);
  // A chunked head's items write their outputs (normalised by their own
  // sums), maxima and sums here, each on cache lines of its own;
  // CombineChunks folds them into `out`.
  const int64_t stride = RoundUp(g * (hd + 2), 16);
  thread_local AlignedVector<float> partial;
  if (chunks > 1) partial.resize(items * stride);
  float* const part = partial.data();
  // Heads whose chunks all ran on one thread are folded there; the rest
  // after the split, on the caller.
  thread_local std::vector<uint8_t> folded;
  if (chunks > 1) folded.assign(static_cast<size_t>(kvh), 0);
  uint8_t* const done = folded.data();
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  // Item i: KV head i / chunks, its keys [c0, c1) for chunk i % chunks.
  auto item_keys = [&](int64_t i, int64_t& c0, int64_t& c1) {
    c0 = i % chunks * chunk_keys;
    c1 = std::min(n, c0 + chunk_keys);
  };
  // The first block of keys of each head this thread starts (a window
  // layer's whole window), and of the item it starts at, asked for before
  // any of them is scored: DecodeScores fetches a block's values and the
  // next block's keys as it scores, but a head's first block's keys came in
  // as they were read, one miss after another, from wherever the weights
  // streamed since the last step left them. A window layer has only that
  // block: full4 all-window at 2048 tokens, f16 cache, Zen 5, its decode
  // attention 0.022-0.034 ms a step before, 0.020-0.026 after on 2 threads
  // on OpenMP (one thread a layer), and 0.026-0.029 / 0.022-0.025 on 1
  // thread (`hilnas agent --price-windows`, old and new alternated;
  // bench/data/runtime-compare.md). Not a later chunk's, ahead of it:
  // fetched whole as the chunk before it started, its 16 KB more in L1
  // pushed out the block being scored (full4 at 2048 tokens, 2 threads:
  // decode attention 0.188 ms a step against 0.170 without chunks), and
  // fetched eight rows at a time as that chunk scored its last block (as
  // DecodeScores fetches any next block) it made no difference the host's
  // noise let through (0.314 / 0.321 ms on 1 thread, 0.168 / 0.165 on 2).
  auto fetch_first_block = [&](int64_t i) {
    int64_t c0, c1;
    item_keys(i, c0, c1);
    PrefetchLines(keys + i / chunks * head_stride + c0 * row,
                  std::min(c1 - c0, kDecodeBlockKeys) * row * static_cast<int64_t>(sizeof(KV)));
  };
  auto run = [&](int64_t first, int64_t last) {
    thread_local Scratch scratch;
    for (int64_t i = first; i < last; ++i) {
      if (i == first || i % chunks == 0) fetch_first_block(i);
    }
    for (int64_t i = first; i < last; ++i) {
      const int64_t gi = i / chunks;
      int64_t c0, c1;
      item_keys(i, c0, c1);
      const Shape shape{hd,
                        key_start + c0,
                        key_start + c1,
                        /*window=*/0,
                        kDecodeBlockKeys,
                        scale,
                        /*kt_stride=*/0};
      float* const dst = chunks > 1 ? part + i * stride : out + gi * g * hd;
      Item it{q + gi * g * hd, hd, dst, nullptr, nullptr, nullptr, 1, g, position};
      const int64_t at = gi * head_stride + c0 * row;
      if constexpr (std::is_same_v<KV, float>) {
        it.keys = keys + at;
        it.values = values + at;
      } else {
        it.cache = std::is_same_v<KV, Q8Block> ? Item::Cache::kQ8_0 : Item::Cache::kF16;
        it.keys_raw = keys + at;
        it.values_raw = values + at;
      }
      AttendItem(it, shape, scratch);
      if (chunks > 1) {
        for (int64_t r = 0; r < g; ++r) {
          dst[g * hd + 2 * r] = scratch.m[r];
          dst[g * hd + 2 * r + 1] = scratch.l[r];
        }
        if (i % chunks == chunks - 1 && i + 1 - chunks >= first) {
          CombineChunks(part + (i + 1 - chunks) * stride, chunks, stride, g, hd, out + gi * g * hd);
          done[gi] = 1;
        }
      }
    }
  };
  if (2.0 * static_cast<double>(h) * n * hd < decode_split_work.load(std::memory_order_relaxed) ||
      items == 1) {
    run(0, items);
  } else {
    // Whole heads a thread where there are heads enough for the threads (a
    // share of one piece: no pieces to hand between them, d2d17ee); chunks
    // otherwise. Which thread runs an item changes no bit.
    ParallelFor(0, items, kvh >= at::get_num_threads() ? chunks : 1, run);
  }
  if (chunks > 1) {
    for (int64_t gi = 0; gi < kvh; ++gi) {
      if (done[gi] == 0) {
        CombineChunks(part + gi * chunks * stride, chunks, stride, g, hd, out + gi * g * hd);
      }
    }
  }
}

}  // namespace

void DecodeAttention(const float* q, int64_t h, int64_t kvh, int64_t hd, const float* keys,
                     const float* values, int64_t head_stride, int64_t n, int64_t key_start,
                     int64_t position, float* out, bool window_layer) {
  DecodeAttentionAs(q, h, kvh, hd, keys, values, head_stride, n, key_start, position, out,
                    window_layer);
}

void DecodeAttention(const float* q, int64_t h, int64_t kvh, int64_t hd, const uint16_t* keys,
                     const uint16_t* values, int64_t head_stride, int64_t n, int64_t key_start,
                     int64_t position, float* out, bool window_layer) {
  DecodeAttentionAs(q, h, kvh, hd, reinterpret_cast<const NativeHalf*>(keys),
                    reinterpret_cast<const NativeHalf*>(values), head_stride, n, key_start,
                    position, out, window_layer);
}

void DecodeAttention(const float* q, int64_t h, int64_t kvh, int64_t hd, const uint8_t* keys,
                     const uint8_t* values, int64_t head_stride, int64_t n, int64_t key_start,
                     int64_t position, float* out, bool window_layer) {
  TORCH_CHECK(hd % kQuantBlock == 0 && head_stride % kQ8BlockBytes == 0,
              "a Q8_0 cache needs whole blocks: head_dim ", hd, ", head stride ", head_stride);
  DecodeAttentionAs(q, h, kvh, hd, reinterpret_cast<const Q8Block*>(keys),
                    reinterpret_cast<const Q8Block*>(values), head_stride / kQ8BlockBytes, n,
                    key_start, position, out, window_layer);
}

torch::Tensor BlockedAttention(const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, int64_t q_start, int64_t k_start,
                               int64_t window, int64_t block) {
  torch::NoGradGuard no_grad;
  if (q.scalar_type() == torch::kFloat && k.scalar_type() == torch::kFloat &&
      v.scalar_type() == torch::kFloat) {
    RECORD_FUNCTION(window > 0 ? kWindowRecord : kRecord, {});
    return FloatAttention(q, k, v, q_start, k_start, window, block);
  }
  return AtenAttention(q, k, v, q_start, k_start, window, block);
}

int64_t DecodeChunkKeys(int64_t n, int64_t kvh) {
  n = std::max<int64_t>(n, 1);
  const int64_t chunks = std::min((kDecodeItems + kvh - 1) / std::max<int64_t>(kvh, 1),
                                  (n + kDecodeMinChunkKeys - 1) / kDecodeMinChunkKeys);
  if (chunks <= 1) return n;
  return RoundUp((n + chunks - 1) / chunks, kDecodeBlockKeys);
}

double DecodeSplitWork() { return decode_split_work.load(std::memory_order_relaxed); }

void SetDecodeSplitWork(double multiply_adds) {
  decode_split_work.store(multiply_adds, std::memory_order_relaxed);
}

std::string DecodeSplitTuning::Describe() const {
  if (points.empty()) {
    return absl::StrFormat("not split (%d thread%s)", threads, threads == 1 ? "" : "s");
  }
  std::string out = keys > 0 ? absl::StrFormat("split from %d keys on %d threads", keys, threads)
                             : absl::StrFormat("not split up to %d keys on %d threads",
                                               points.back().keys, threads);
  std::vector<std::string> parts;
  for (const Point& p : points) {
    parts.push_back(
        absl::StrFormat("%d: %.1f us split, %.1f on one", p.keys, p.split_us, p.one_thread_us));
  }
  if (!retimed.empty()) parts.push_back(absl::StrCat("timed twice: ", retimed));
  return absl::StrCat(out, " (", absl::StrJoin(parts, "; "),
                      absl::StrFormat("; tuned in %.2f s)", seconds));
}

namespace {
// The longest cache TuneDecodeSplit times: a full layer's at 2048 tokens.
constexpr int64_t kDecodeSweepMaxKeys = 2048;
}  // namespace

DecodeSplitTuning TuneDecodeSplit(int64_t h, int64_t kvh, int64_t hd,
                                  const std::string& cache_dtype) {
  // Nothing to split: the threshold kept.
  DecodeSplitTuning none;
  none.threads = at::get_num_threads();
  none.work = DecodeSplitWork();
  // One KV head splits too, from two chunks of keys (DecodeChunkKeys).
  if (none.threads < 2 || h % kvh != 0 || hd < 1) return none;
  constexpr int64_t kMaxKeys = kDecodeSweepMaxKeys;
  const bool q8 = cache_dtype == "q8_0";
  if (q8 && hd % kQuantBlock != 0) return none;
  // A cache of kMaxKeys rows per KV head, random values in its dtype.
  const int64_t row = q8 ? hd / kQuantBlock * kQ8BlockBytes : hd;  // elements or bytes
  // Its own generator: the process's global one is the caller's.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
  const torch::Tensor kf = torch::randn({kvh, kMaxKeys, hd}, gen),
                      vf = torch::randn({kvh, kMaxKeys, hd}, gen);
  torch::Tensor keys, values;
  if (q8) {
    keys = torch::empty({kvh * kMaxKeys * row}, torch::kByte);
    values = torch::empty({kvh * kMaxKeys * row}, torch::kByte);
    for (int64_t r = 0; r < kvh * kMaxKeys; ++r) {
      QuantizeActivationsFast(kf.data_ptr<float>() + r * hd, hd,
                              keys.data_ptr<uint8_t>() + r * row);
      QuantizeActivationsFast(vf.data_ptr<float>() + r * hd, hd,
                              values.data_ptr<uint8_t>() + r * row);
    }
  } else if (cache_dtype == "f16") {
    keys = kf.to(torch::kHalf).contiguous();
    values = vf.to(torch::kHalf).contiguous();
  } else {
    keys = kf;
    values = vf;
  }
  const torch::Tensor q = torch::randn({h, hd}, gen);
  torch::Tensor out = torch::empty({h, hd});
  auto call = [&](int64_t n) {
    const int64_t stride = kMaxKeys * row;
    if (q8) {
      DecodeAttention(q.data_ptr<float>(), h, kvh, hd, keys.data_ptr<uint8_t>(),
                      values.data_ptr<uint8_t>(), stride, n, 0, n - 1, out.data_ptr<float>());
    } else if (keys.scalar_type() == torch::kHalf) {
      DecodeAttention(q.data_ptr<float>(), h, kvh, hd,
                      reinterpret_cast<const uint16_t*>(keys.data_ptr<at::Half>()),
                      reinterpret_cast<const uint16_t*>(values.data_ptr<at::Half>()), stride, n, 0,
                      n - 1, out.data_ptr<float>());
    } else {
      DecodeAttention(q.data_ptr<float>(), h, kvh, hd, keys.data_ptr<float>(),
                      values.data_ptr<float>(), stride, n, 0, n - 1, out.data_ptr<float>());
    }
  };
  constexpr double kNever = std::numeric_limits<double>::infinity();
  DecodeSplitTuning t = SweepDecodeSplit(
      none.threads, 2.0 * static_cast<double>(h) * hd, [&](int64_t n, bool split, int calls) {
        SetDecodeSplitWork(split ? 0 : kNever);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) call(n);
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                   .count() /
               calls;
      });
  SetDecodeSplitWork(t.work);
  return t;
}

DecodeSplitTuning SweepDecodeSplit(int threads, double work_per_key,
                                   const DecodeBatchTimer& timer) {
  DecodeSplitTuning t;
  t.threads = threads;
  constexpr int64_t kMaxKeys = kDecodeSweepMaxKeys;
  constexpr int kBatches = 15;
  auto pays = [](const DecodeSplitTuning::Point& p) { return p.split_us < 0.95 * p.one_thread_us; };
  // The medians of kBatches batches on one thread and split at each of
  // `lengths`, after a warm-up of each (the workers awake, the cache rows
  // read once); a round times every length in turn.
  //
  // Each split batch runs twice, the first untimed: the one-thread batch
  // before it (60-160 us) lets the spin pool's workers fall asleep (they
  // spin 100 us after a call, model/work_split.cc), and the split batch
  // timed next would pay their waking, which a decode step, whose GEMVs
  // split on the same pool between its attention calls, does not. Timed
  // with it, full4's heads over an f16 cache on a 2-vCPU Zen 5 split 128
  // keys in 3.4-3.8 us against 4.1-4.3 on one thread (so close to the 5%
  // that some processes split from 256 keys), 256 in 5.8-6.1; with the
  // untimed batch first 3.1-3.5 and 4.9-5.5 (12 processes each).
  auto time_lengths = [&](const std::vector<int64_t>& lengths) {
    auto calls_at = [](int64_t n) { return static_cast<int>(std::max<int64_t>(4, 4096 / n)); };
    for (int64_t n : lengths) timer(n, true, calls_at(n));
    std::vector<std::vector<double>> one(lengths.size()), split(lengths.size());
    for (int b = 0; b < kBatches; ++b) {
      for (size_t i = 0; i < lengths.size(); ++i) {
        const int calls = calls_at(lengths[i]);
        one[i].push_back(timer(lengths[i], false, calls));
        timer(lengths[i], true, calls);  // the workers woken, untimed
        split[i].push_back(timer(lengths[i], true, calls));
      }
    }
    std::vector<DecodeSplitTuning::Point> points;
    for (size_t i = 0; i < lengths.size(); ++i) {
      points.push_back({lengths[i], Median(one[i]), Median(split[i])});
    }
    return points;
  };
  const auto start = std::chrono::steady_clock::now();
  for (int64_t n = 32; n <= kMaxKeys; n *= 2) {
    t.points.push_back(time_lengths({n})[0]);
    // Two lengths in a row split faster: a longer one has more work for
    // the same hand-over, so the sweep stops (its longest lengths are most
    // of its time, a second or more on a phone's core at a 1B shape).
    const size_t m = t.points.size();
    if (m >= 2 && pays(t.points[m - 1]) && pays(t.points[m - 2])) break;
  }
  // The fewest keys from which every longer length measured also splits
  // faster (points.size(): none).
  auto split_from = [&] {
    size_t from = t.points.size();
    while (from > 0 && pays(t.points[from - 1])) --from;
    return from;
  };
  const size_t from = split_from();
  const bool any_pays = std::any_of(t.points.begin(), t.points.end(), pays);
  if (!any_pays || std::any_of(t.points.begin(), t.points.begin() + from, pays)) {
    t.retimed =
        any_pays ? absl::StrFormat("a length split faster than a longer one (%s)",
                                   from < t.points.size()
                                       ? absl::StrFormat("first: from %d keys", t.points[from].keys)
                                       : std::string("first: not split"))
                 : "no length split faster";
    std::vector<int64_t> lengths;
    for (const DecodeSplitTuning::Point& p : t.points) lengths.push_back(p.keys);
    t.points = time_lengths(lengths);
  }
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const size_t chosen = split_from();
  if (chosen < t.points.size()) {
    t.keys = t.points[chosen].keys;
    t.work = work_per_key * t.keys;
  } else {
    t.work = 2 * work_per_key * kMaxKeys;
  }
  return t;
}

}  // namespace hilnas
