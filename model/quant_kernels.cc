// The quantized products of model/quant.h: a Q4_0 or Q8_0 weight block
// times a Q8_0 activation block is d_w * d_x * (32 integer products), summed
// in f32 over a row's blocks. One path per instruction set, picked at run
// time: AVX-512 VNNI (VPDPBUSD), AVX2 (VPMADDUBSW + VPMADDWD), NEON with
// the 8-bit matrix multiply (SMMLA, for prompts), with the dot-product
// extension (SDOT) and without (SMULL + SADALP), and a portable loop.
// Integer sums are exact on every path; the f32 sums over blocks may
// differ in their last bits (each path adds in its own order).
//
// Kept out of the library's unity batches (model/CMakeLists.txt): its
// helpers are compiled for several instruction sets.
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/quant.h"
#include "util/aligned.h"
#include "util/cpu_caches.h"
#include "util/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace hilnas {
namespace {

constexpr int64_t kQ8Bytes = kQ8BlockBytes;
constexpr int kTokenTile = 4;  // tokens sharing one unpacked weight block

// A prompt's products run in blocks that stay in L2 together: about
// QuantPromptBlocks().act_bytes of activation rows against about its
// weight_bytes of weights (QuantGemm's rows, a grouped matrix's groups),
// every token of the block over every row of it. The sizes follow the L2
// a thread has (model/quant.h).

// Tokens of `blocks` Q8_0 blocks a row in one block of `pb`: a multiple of
// kTokenTile, so each block starts on a tile (and on an SMMLA token pair).
inline int64_t TokensPerBlock(int64_t blocks, const PromptBlocks& pb) {
  return std::max<int64_t>(kTokenTile,
                           pb.act_bytes / (blocks * kQ8Bytes) / kTokenTile * kTokenTile);
}

// Grouped Q4_0 groups of `blocks` blocks in one block of `pb`.
inline int64_t GroupsPerBlock(int64_t blocks, const PromptBlocks& pb) {
  return std::max<int64_t>(1, pb.weight_bytes / (blocks * kQ4GroupBlockBytes));
}

// `tokens` rows of Q8_0 activations as the kernels read them (model/quant.h).
using Acts = QuantActs;

// ---- Portable ----

// The 32 weights of a block as int8: Q8_0's as stored, Q4_0's nibbles - 8
// in order (low nibbles are weights 0..15, high ones 16..31).
inline void Unpack(QuantType t, const uint8_t* block, int8_t w[32]) {
  if (t == QuantType::kQ8_0) {
    std::memcpy(w, block + 2, 32);
    return;
  }
  for (int j = 0; j < 16; ++j) {
    w[j] = static_cast<int8_t>((block[2 + j] & 15) - 8);
    w[j + 16] = static_cast<int8_t>((block[2 + j] >> 4) - 8);
  }
}

inline int32_t Dot32(const int8_t* w, const int8_t* x) {
  int32_t s = 0;
  for (int j = 0; j < 32; ++j) s += static_cast<int32_t>(w[j]) * x[j];
  return s;
}

void GemmPortable(QuantType t, const uint8_t* w, int64_t blocks, const Acts& x, int64_t tokens,
                  float* c, int64_t ldc, int64_t first, int64_t last) {
  const int64_t bs = QuantBlockBytes(t);
  int8_t unpacked[32];
  for (int64_t o = first; o < last; ++o) {
    const uint8_t* row = w + o * blocks * bs;
    for (int64_t i = 0; i < tokens; ++i) {
      float sum = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        Unpack(t, row + b * bs, unpacked);
        const int8_t* xb = reinterpret_cast<const int8_t*>(x.q + i * x.stride + b * kQ8Bytes + 2);
        sum += BlockScale(row + b * bs) * x.d[i * blocks + b] *
               static_cast<float>(Dot32(unpacked, xb));
      }
      c[i * ldc + o] = sum;
    }
  }
}

// Grouped Q4_0 (model/quant.h): each row's blocks taken out of its group
// once, into the row form, and that row through GemmPortable.
void GemmGroupsPortable(const uint8_t* g, int64_t blocks, const Acts& x, int64_t tokens, float* c,
                        int64_t ldc, int64_t first, int64_t last) {
  thread_local std::vector<uint8_t> row;
  row.resize(static_cast<size_t>(blocks * kQ4BlockBytes));
  for (int64_t k = first; k < last; ++k) {
    const uint8_t* group = g + k * blocks * kQ4GroupBlockBytes;
    for (int64_t r = 0; r < kQ4GroupRows; ++r) {
      for (int64_t b = 0; b < blocks; ++b) {
        UngroupQ4Block(group + b * kQ4GroupBlockBytes, r, row.data() + b * kQ4BlockBytes);
      }
      GemmPortable(QuantType::kQ4_0, row.data(), blocks, x, tokens, c + k * kQ4GroupRows + r, ldc,
                   0, 1);
    }
  }
}

// ---- x86: AVX2, and AVX-512 VNNI for the integer dot ----
//
// model/internal/quant_x86.inc compiled twice, each under its own target:
// an AVX2 build must not contain one EVEX instruction, and always-inline
// helpers cannot cross targets.
#if defined(__x86_64__)

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
namespace avx2 {
#define HILNAS_QUANT_VNNI 0
#define HILNAS_QUANT_ROWS 2
#include "model/internal/quant_x86.inc"
#undef HILNAS_QUANT_ROWS
#undef HILNAS_QUANT_VNNI
}  // namespace avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512vl,avx512vnni")
namespace vnni {
#define HILNAS_QUANT_VNNI 1
#define HILNAS_QUANT_ROWS 4
#include "model/internal/quant_x86.inc"
#undef HILNAS_QUANT_ROWS
#undef HILNAS_QUANT_VNNI
}  // namespace vnni
#pragma GCC pop_options

// The CPU's features as the kernels may use them (util/cpu_features.h).
bool HasQuantAvx2() { return KernelCpuFeatures().Avx2FmaF16c(); }

bool HasVnni() {
  return HasQuantAvx2() && KernelCpuFeatures().avx512vl && KernelCpuFeatures().avx512vnni;
}
#endif  // __x86_64__

// ---- aarch64: NEON, with and without the dot-product extension ----
#if defined(__aarch64__)
inline int8x16x2_t UnpackNeon(QuantType t, const uint8_t* block) {
  if (t == QuantType::kQ8_0) {
    return {vld1q_s8(reinterpret_cast<const int8_t*>(block + 2)),
            vld1q_s8(reinterpret_cast<const int8_t*>(block + 18))};
  }
  const uint8x16_t packed = vld1q_u8(block + 2);
  const int8x16_t eight = vdupq_n_s8(8);
  return {vsubq_s8(vreinterpretq_s8_u8(vandq_u8(packed, vdupq_n_u8(15))), eight),
          vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(packed, 4)), eight)};
}

// model/internal/quant_neon.inc twice: plain NEON, and under
// target("arch=armv8.2-a+dotprod") for SDOT (GCC 12 refuses a bare
// "+dotprod"; always-inline helpers cannot cross targets).
// HILNAS_NEON_DOT(w, x) is the four int32 partial sums of a block's w . x.
namespace neon {
#define HILNAS_NEON_DOT(w, x) DotPairs(w, x)
#define HILNAS_NEON_DOT_LANE(acc, w, x, lane) \
  vaddq_s32(acc,                              \
            DotLanePairs(w, vreinterpretq_s8_s32(vdupq_laneq_s32(vreinterpretq_s32_s8(x), lane))))
inline int32x4_t DotPairs(int8x16x2_t w, const int8_t* x) {
  const int8x16_t x0 = vld1q_s8(x), x1 = vld1q_s8(x + 16);
  const int16x8_t p0 = vmull_s8(vget_low_s8(w.val[0]), vget_low_s8(x0));
  const int16x8_t p1 = vmull_high_s8(w.val[0], x0);
  const int16x8_t p2 = vmull_s8(vget_low_s8(w.val[1]), vget_low_s8(x1));
  const int16x8_t p3 = vmull_high_s8(w.val[1], x1);
  return vaddq_s32(vaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1)),
                   vaddq_s32(vpaddlq_s16(p2), vpaddlq_s16(p3)));
}
// Lane r: the sum of w's and x's four bytes in lane r (x holds the same
// four bytes in every lane), through SMULL and two pairwise adds.
inline int32x4_t DotLanePairs(int8x16_t w, int8x16_t x) {
  const int16x8_t p0 = vmull_s8(vget_low_s8(w), vget_low_s8(x));
  const int16x8_t p1 = vmull_high_s8(w, x);
  return vpaddq_s32(vpaddlq_s16(p0), vpaddlq_s16(p1));
}
#include "model/internal/quant_neon.inc"
#undef HILNAS_NEON_DOT_LANE
#undef HILNAS_NEON_DOT
}  // namespace neon

#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod")
namespace neon_dot {
#define HILNAS_NEON_DOT(w, x) \
  vdotq_s32(vdotq_s32(vdupq_n_s32(0), w.val[0], vld1q_s8(x)), w.val[1], vld1q_s8((x) + 16))
#define HILNAS_NEON_DOT_LANE(acc, w, x, lane) vdotq_laneq_s32(acc, w, x, lane)
#include "model/internal/quant_neon.inc"
#undef HILNAS_NEON_DOT_LANE
#undef HILNAS_NEON_DOT
}  // namespace neon_dot
#pragma GCC pop_options

// The 8-bit matrix multiply (FEAT_I8MM): SMMLA takes two rows of eight
// int8 in one register and two columns of eight in another and adds their
// 2 x 2 products into four int32 lanes, [r0.c0, r0.c1, r1.c0, r1.c1]: 32
// multiply-adds an instruction where SDOT's are 16. A prompt's products
// take two weight rows against two tokens at a time; each token pair's
// activation blocks are interleaved once per block of tokens, eight bytes
// of one token beside eight of the other (Pairs below), as llama.cpp's
// NEON Q4_0 and Q8_0 dots do for two rows (nrc == 2,
// __ARM_FEATURE_MATMUL_INT8). One token (decode) gains nothing from it and
// stays on SDOT, as does a prompt's odd last token or row.
#pragma GCC push_options
#pragma GCC target("arch=armv8.2-a+dotprod+i8mm")
namespace neon_mm {
#define HILNAS_NEON_DOT(w, x) \
  vdotq_s32(vdotq_s32(vdupq_n_s32(0), w.val[0], vld1q_s8(x)), w.val[1], vld1q_s8((x) + 16))
#define HILNAS_NEON_DOT_LANE(acc, w, x, lane) vdotq_laneq_s32(acc, w, x, lane)
#include "model/internal/quant_neon.inc"
#undef HILNAS_NEON_DOT_LANE
#undef HILNAS_NEON_DOT
#include "model/internal/quant_i8mm.inc"
}  // namespace neon_mm
#pragma GCC pop_options

// QuantizeActivations' bytes, eight float32x4 a block: the same maximum,
// the same product x * (127 / amax) rounded to nearest even (FCVTNS, as
// std::nearbyint rounds), and the scale through FCVTN, c10::Half's
// rounding. Every quantized product quantizes its input, and a decode step
// its queries and cache rows, with it.
void QuantizeXNeon(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float32x4_t v[8];
    float32x4_t amax = vdupq_n_f32(0);
    for (int k = 0; k < 8; ++k) {
      v[k] = vld1q_f32(xb + 4 * k);
      amax = vmaxq_f32(amax, vabsq_f32(v[k]));
    }
    const float mx = vmaxvq_f32(amax);
    uint8_t* blk = out + b * kQ8Bytes;
    const uint16_t d =
        vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(mx / 127.0f))), 0);
    std::memcpy(blk, &d, 2);
    const float id = mx != 0 ? 127.0f / mx : 0.0f;
    for (int k = 0; k < 8; k += 2) {
      const int16x8_t h = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[k], id))),
                                       vqmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[k + 1], id))));
      vst1_s8(reinterpret_cast<int8_t*>(blk + 2 + 4 * k), vqmovn_s16(h));
    }
  }
}

bool HasDotProduct() { return KernelCpuFeatures().dotprod; }
// SMMLA's path also takes SDOT's for a lone token or row.
bool HasMatMulInt8() { return KernelCpuFeatures().dotprod && KernelCpuFeatures().i8mm; }
#endif  // __aarch64__

}  // namespace

void QuantizeActivationsFast(const float* x, int64_t n, uint8_t* out) {
#if defined(__x86_64__)
  if (HasQuantAvx2()) return avx2::QuantizeX(x, n, out);
#elif defined(__aarch64__)
  if (KernelCpuFeatures().neon) return QuantizeXNeon(x, n, out);
#endif
  QuantizeActivations(x, n, out);
}

namespace {

constexpr int64_t kAssumedL2 = int64_t{1} << 20;
// SetPromptBlocks's sizes; 0: this CPU's.
std::atomic<int64_t> g_set_act{0}, g_set_weight{0};

}  // namespace

PromptBlocks PromptBlocksForL2(int64_t l2_bytes) {
  if (l2_bytes <= 0) l2_bytes = kAssumedL2;
  PromptBlocks b;
  b.act_bytes = std::clamp<int64_t>(l2_bytes / 4 * 3, int64_t{32} << 10, int64_t{1} << 20);
  b.weight_bytes = std::clamp<int64_t>(l2_bytes / 8, int64_t{16} << 10, int64_t{512} << 10);
  return b;
}

PromptBlocks QuantPromptBlocks() {
  PromptBlocks set;
  set.act_bytes = g_set_act.load(std::memory_order_relaxed);
  set.weight_bytes = g_set_weight.load(std::memory_order_relaxed);
  if (set.act_bytes > 0 && set.weight_bytes > 0) return set;
  return PromptBlocksForL2(KernelCpuCaches().l2);  // 0 (unknown): assumed
}

void SetPromptBlocks(std::optional<PromptBlocks> blocks) {
  const bool on = blocks && blocks->act_bytes > 0 && blocks->weight_bytes > 0;
  g_set_act.store(on ? blocks->act_bytes : 0, std::memory_order_relaxed);
  g_set_weight.store(on ? blocks->weight_bytes : 0, std::memory_order_relaxed);
}

std::string PromptBlocksDescription() {
  const PromptBlocks b = QuantPromptBlocks();
  const CpuCaches& caches = KernelCpuCaches();
  const std::string whence =
      g_set_act.load(std::memory_order_relaxed) > 0 ? "set by SetPromptBlocks"
      : caches.l2 > 0 ? absl::StrCat("L2 ", CacheBytes(caches.l2), ", ", caches.source)
                      : absl::StrCat("L2 not reported (", caches.source,
                                     "): ", CacheBytes(kAssumedL2), " assumed");
  return absl::StrCat(b.act_bytes >> 10, " KiB of activations x ", b.weight_bytes >> 10,
                      " KiB of weights (", whence, ")");
}

const char* QuantKernelName() {
#if defined(__x86_64__)
  if (HasVnni()) return "avx512vnni";
  if (HasQuantAvx2()) return "avx2";
#elif defined(__aarch64__)
  if (KernelCpuFeatures().neon) {
    return HasMatMulInt8() ? "neon+i8mm" : HasDotProduct() ? "neon+dotprod" : "neon";
  }
#endif
  return "portable";
}

namespace {

// `tokens` rows of activations as the kernels read them: the scales as
// floats and the blocks' sums, once per call (each is used by every row of
// the call), in per-thread buffers.
Acts ActsOf(const uint8_t* xq, int64_t blocks, int64_t tokens) {
  thread_local AlignedVector<float> xd;
  thread_local AlignedVector<int32_t> xs;
  xd.resize(static_cast<size_t>(tokens * blocks));
  xs.resize(static_cast<size_t>(tokens * blocks));
  QuantActTerms(xq, blocks, tokens, xd.data(), xs.data());
  return Acts{xq, blocks * kQ8Bytes, xd.data(), xs.data()};
}

}  // namespace

void QuantActTerms(const uint8_t* xq, int64_t blocks, int64_t tokens, float* d, int32_t* sum) {
  for (int64_t k = 0; k < tokens * blocks; ++k) {
    const uint8_t* blk = xq + k * kQ8Bytes;
    d[k] = BlockScale(blk);
    int32_t s = 0;
    for (int j = 0; j < 32; ++j) s += static_cast<int8_t>(blk[2 + j]);
    sum[k] = s;
  }
}

bool QuantGroupsRowsHere() {
#if defined(__x86_64__)
  return HasQuantAvx2();
#elif defined(__aarch64__)
  return KernelCpuFeatures().neon;
#else
  return false;  // the portable loop reads rows
#endif
}

namespace {

using GroupsKernel = void (*)(const uint8_t*, int64_t, const Acts&, int64_t, float*, int64_t,
                              int64_t, int64_t);

using RowsKernel = void (*)(QuantType, const uint8_t*, int64_t, const Acts&, int64_t, float*,
                            int64_t, int64_t, int64_t);

// The kernel QuantGemm runs for `path` on this CPU.
RowsKernel RowsKernelFor(KernelPath path) {
  if (path == KernelPath::kPortable) return GemmPortable;
#if defined(__x86_64__)
  if (path == KernelPath::kBest && HasVnni()) return vnni::Gemm;
  if (HasQuantAvx2()) return avx2::Gemm;
#elif defined(__aarch64__)
  if (KernelCpuFeatures().neon) {
    return path != KernelPath::kBest ? neon::Gemm
           : HasMatMulInt8()         ? neon_mm::Gemm  // SDOT's; SMMLA (QuantGemm) for two tokens up
           : HasDotProduct()         ? neon_dot::Gemm
                                     : neon::Gemm;
  }
#endif
  return GemmPortable;
}

// The kernel QuantGroupsGemm runs for `path` on this CPU.
GroupsKernel GroupsKernelFor(KernelPath path) {
  if (path == KernelPath::kPortable) return GemmGroupsPortable;
#if defined(__x86_64__)
  if (HasQuantAvx2()) {
    return path == KernelPath::kBest && HasVnni() ? vnni::GemmGroups : avx2::GemmGroups;
  }
#elif defined(__aarch64__)
  if (KernelCpuFeatures().neon) {
    if (path == KernelPath::kBest && HasMatMulInt8()) return neon_mm::GemmGroupsPairs;
    return path == KernelPath::kBest && HasDotProduct() ? neon_dot::GemmGroups : neon::GemmGroups;
  }
#endif
  return GemmGroupsPortable;
}

// A prompt over grouped Q4_0 in blocks that stay in cache together, as
// QuantGemm's row form runs (TokensPerBlock, GroupsPerBlock). A kernel
// given all its groups at once sweeps them for every tile of four tokens:
// past the last-level cache (a 33 MiB matrix, 4096 wide, 256 tokens on one
// Zen 5 thread) that read 1.26x slower than blocks, and a phone's L3 holds
// a few MiB. One token (decode) streams the groups once.
void GroupsInBlocks(GroupsKernel gemm, const uint8_t* g, int64_t blocks, const Acts& x,
                    int64_t tokens, float* c, int64_t ldc, int64_t first, int64_t last) {
  const PromptBlocks pb = QuantPromptBlocks();
  const int64_t tokens_per = TokensPerBlock(blocks, pb), groups_per = GroupsPerBlock(blocks, pb);
  if (tokens == 1 || (tokens <= tokens_per && last - first <= groups_per)) {
    return gemm(g, blocks, x, tokens, c, ldc, first, last);
  }
  for (int64_t i0 = 0; i0 < tokens; i0 += tokens_per) {
    const int64_t n = std::min(tokens_per, tokens - i0);
    for (int64_t k0 = first; k0 < last; k0 += groups_per) {
      gemm(g, blocks, x.From(i0, blocks), n, c + i0 * ldc, ldc, k0,
           std::min(last, k0 + groups_per));
    }
  }
}

}  // namespace

void QuantGroupsGemm(const uint8_t* groups, int64_t blocks, const uint8_t* xq, int64_t tokens,
                     float* c, int64_t ldc, int64_t first, int64_t last, KernelPath path) {
  QuantGroupsGemm(groups, blocks, ActsOf(xq, blocks, tokens), tokens, c, ldc, first, last, path);
}

void QuantGroupsGemm(const uint8_t* groups, int64_t blocks, const QuantActs& x, int64_t tokens,
                     float* c, int64_t ldc, int64_t first, int64_t last, KernelPath path) {
  const GroupsKernel gemm = GroupsKernelFor(path);
#if defined(__aarch64__)
  if (gemm == neon_mm::GemmGroupsPairs) {  // blocks of its own (token pairs)
    return gemm(groups, blocks, x, tokens, c, ldc, first, last);
  }
#endif
  if (gemm == GemmGroupsPortable) return gemm(groups, blocks, x, tokens, c, ldc, first, last);
  GroupsInBlocks(gemm, groups, blocks, x, tokens, c, ldc, first, last);
}

OneTokenKernels QuantOneTokenKernels(KernelPath path) {
  return {RowsKernelFor(path), GroupsKernelFor(path)};
}

void QuantGemm(QuantType t, const uint8_t* w, int64_t blocks, const uint8_t* xq, int64_t tokens,
               float* c, int64_t ldc, int64_t first, int64_t last, KernelPath path) {
  QuantGemm(t, w, blocks, ActsOf(xq, blocks, tokens), tokens, c, ldc, first, last, path);
}

void QuantGemm(QuantType t, const uint8_t* w, int64_t blocks, const QuantActs& x, int64_t tokens,
               float* c, int64_t ldc, int64_t first, int64_t last, KernelPath path) {
  const RowsKernel gemm = RowsKernelFor(path);
  if (tokens == 1) return gemm(t, w, blocks, x, tokens, c, ldc, first, last);
  const PromptBlocks pb = QuantPromptBlocks();
#if defined(__x86_64__)
  if (gemm == vnni::Gemm || gemm == avx2::Gemm) {
    // Rows regrouped eight at a time (quant_x86.inc's GroupTile and
    // Q8GroupTile), twice a block's weights at once (256 KiB on a 1 MiB
    // L2), each chunk against every token.
    const bool q4 = t == QuantType::kQ4_0, vnni_here = gemm == vnni::Gemm;
    // A few tokens (a decode call's query rows over a Q8_0 cache's keys):
    // the rows read where they lie, the same bits (quant_x86.inc's
    // GemmQ8Rows). full4's heads at 2048 keys, 4 rows a KV head, 1 Zen 4
    // thread (`attention_bench --decode-caches 1`): a decode call 74.9-76.0
    // us regrouped, 64.0-66.0 not.
    if (!q4 && tokens <= kTokenTile) {
      return (vnni_here ? vnni::GemmQ8Rows : avx2::GemmQ8Rows)(w, blocks, x, tokens, c, ldc, first,
                                                               last);
    }
    const auto grouped = q4 ? (vnni_here ? vnni::GemmRegrouped<QuantType::kQ4_0>
                                         : avx2::GemmRegrouped<QuantType::kQ4_0>)
                            : (vnni_here ? vnni::GemmRegrouped<QuantType::kQ8_0>
                                         : avx2::GemmRegrouped<QuantType::kQ8_0>);
    const int64_t regrouped_row = blocks * GroupBlockBytes(t) / kQ4GroupRows;
    const int64_t rows_per = std::max<int64_t>(8, 2 * pb.weight_bytes / regrouped_row / 8 * 8);
    for (int64_t r0 = first; r0 < last; r0 += rows_per) {
      grouped(w, blocks, x, tokens, c, ldc, r0, std::min(last, r0 + rows_per));
    }
    return;
  }
#endif
  // A prompt in blocks that stay in L2 together (a block's weight_bytes of
  // weight rows, TokensPerBlock's tokens). Sweeping all rows for each tile
  // of 4 tokens streamed a Llama-3.2-1B FFN matrix (9 MiB of Q4_0) from
  // memory 128 times for a 512-token prompt: prefill 1.21-1.24x
  // llama.cpp's, where full4's and big12's smaller matrices were at
  // 0.8-1.05x.
  const int64_t w_row = blocks * QuantBlockBytes(t);
  const int64_t rows_per = std::max<int64_t>(4, pb.weight_bytes / w_row / 4 * 4);
  const int64_t tokens_per = TokensPerBlock(blocks, pb);
  auto in_blocks = [&](auto&& run) {
    for (int64_t i0 = 0; i0 < tokens; i0 += tokens_per) {
      const int64_t n = std::min(tokens_per, tokens - i0);
      for (int64_t r0 = first; r0 < last; r0 += rows_per) {
        run(i0, n, r0, std::min(last, r0 + rows_per));
      }
    }
  };
#if defined(__aarch64__)
  if (gemm == neon_mm::Gemm) {
    // Each block of tokens' pairs interleaved once, for all its blocks of
    // rows (about 256 KiB a thread, as the block's activations).
    neon_mm::Pairs xp{};
    in_blocks([&](int64_t i0, int64_t n, int64_t r0, int64_t r1) {
      const Acts xi = x.From(i0, blocks);
      if (r0 == first) xp = neon_mm::PairsOf(xi, blocks, n / 2);
      neon_mm::PairsGemm(t, w, blocks, xi, xp, n, c + i0 * ldc, ldc, r0, r1);
    });
    return;
  }
#endif
  in_blocks([&](int64_t i0, int64_t n, int64_t r0, int64_t r1) {
    gemm(t, w, blocks, x.From(i0, blocks), n, c + i0 * ldc, ldc, r0, r1);
  });
}

void QuantRowsDot(QuantType t, const uint8_t* w, int64_t blocks, const uint8_t* xq, float* y,
                  int64_t first, int64_t last, KernelPath path) {
  // One token: y is the row of c, ldc unused.
  QuantGemm(t, w, blocks, xq, 1, y, 0, first, last, path);
}

}  // namespace hilnas
