// GGUF's block-quantized weights, Q8_0 and Q4_0 (issue 36; MobileLLM-Flash
// Sec. 4.2 times every candidate at 4-bit weights, group size 32, with 8-bit
// dynamic activations), and the products the runtime computes on them.
//
// A block is 32 consecutive weights of a row and one f16 scale d:
//   Q8_0: d, then 32 int8 q;            weight j = d * q[j]           (34 bytes)
//   Q4_0: d, then 16 bytes of nibbles;  weight j = d * (nibble j - 8)  (18 bytes)
// where byte i of a Q4_0 block holds weight i in its low nibble and weight
// i + 16 in its high one (ggml's block_q4_0 and block_q8_0).
//
// Products quantize the activations as well: each row of x becomes Q8_0
// blocks, and a weight block times an activation block is d_w * d_x times a
// sum of 32 integer products, which CPUs compute in integer SIMD (AVX2,
// AVX-512 VNNI, NEON's dot-product instructions), as llama.cpp's CPU path
// and ExecuTorch's 8da4w do.
#ifndef HILNAS_MODEL_QUANT_H_
#define HILNAS_MODEL_QUANT_H_

#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/gemv.h"

namespace hilnas {

enum class QuantType { kQ4_0, kQ8_0 };

inline constexpr int64_t kQuantBlock = 32;  // weights per block, both types

inline constexpr int64_t kQ4BlockBytes = 18, kQ8BlockBytes = 34;
inline constexpr int64_t QuantBlockBytes(QuantType t) {
  return t == QuantType::kQ4_0 ? kQ4BlockBytes : kQ8BlockBytes;
}
// A block's scale d (its first two bytes, f16) as a float.
inline float BlockScale(const uint8_t* block) {
  uint16_t h;
  std::memcpy(&h, block, 2);
  return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
}
const char* QuantTypeName(QuantType t);  // "q4_0", "q8_0"
std::optional<QuantType> ParseQuantType(absl::string_view name);

// llama.cpp's reference quantizers (ggml-quants.c, quantize_row_q4_0_ref and
// quantize_row_q8_0_ref, what llama-quantize runs): the same bytes for the
// same floats. Q8_0: d = amax / 127, q = round(x / d) (half away from
// zero). Q4_0: m = the value of largest magnitude, d = m / -8, q = min(15,
// trunc(x / d + 8.5)). The scale is rounded to f16 after the quants are
// computed with the f32 scale. REQUIRES: n % 32 == 0.
void QuantizeRow(QuantType t, const float* x, int64_t n, uint8_t* out);
void DequantizeRow(QuantType t, const uint8_t* q, int64_t n, float* out);

// Activations as Q8_0 blocks for the products: d = amax / 127, q = x * (127
// / amax) rounded half to even (llama.cpp's AVX2 and NEON activation
// quantizers, which differ from the reference in the last rounding).
void QuantizeActivations(const float* x, int64_t n, uint8_t* out);
// The same bytes, vectorised where the CPU allows (model/quant_kernels.cc).
void QuantizeActivationsFast(const float* x, int64_t n, uint8_t* out);

// A quantized matrix is a uint8 tensor [rows, cols / 32, block bytes].
// QuantizeMatrix: w f32 [rows, cols], cols % 32 == 0 (INVALID_ARGUMENT
// naming the width otherwise).
absl::StatusOr<torch::Tensor> QuantizeMatrix(const torch::Tensor& w, QuantType t);
// The type of a tensor in that form or in the grouped one below, nullopt
// for any other tensor.
std::optional<QuantType> QuantTypeOf(const torch::Tensor& w);
inline int64_t QuantColumns(const torch::Tensor& w) { return w.size(1) * kQuantBlock; }
torch::Tensor DequantizeMatrix(const torch::Tensor& q);  // f32 [rows, cols], either form

// Q4_0 rows grouped eight at a time, as a decoder keeps its Q4_0 matrices
// where the kernels read them so (x86 with AVX2, aarch64 with NEON:
// QuantGroupsRowsHere): a uint8 tensor [rows / 8, cols / 32, 144], the same
// bytes as the row form in another order (llama.cpp's CPU backend repacks
// Q4_0 likewise, its q4_0_8x8 and q4_0_4x4). Block b of group g is the
// eight rows' block b: their f16 scales (bytes 0..15, row r's at 2r), then
// four chunks of 32 bytes, chunk j holding bytes 4j..4j+3 of each row's 16
// bytes of nibbles (row r's at 16 + 32j + 4r). One 32-bit lane is one row:
// four activation bytes broadcast to every lane feed all eight rows at once
// (four a 128-bit NEON register), and the f32 work is one conversion,
// product and FMA per eight rows, where a row at a time spends those on
// each. A one-thread Q4_0 GEMV over 8 MiB of weights read them 2.1-2.4x
// faster grouped, over 512 MiB 1.6x (bench/quant_gemv, Xeon model 207; the
// prompt kernel regrouped its rows per call before).
inline constexpr int64_t kQ4GroupRows = 8, kQ4GroupBlockBytes = 144;
// Q8_0 in the same form, for a prompt's products, which regroup its rows
// per call on x86 (model/internal/quant_x86.inc): the eight scales, then
// eight chunks of 32 bytes, chunk j holding bytes 4j..4j+3 of each row's 32
// quants.
inline constexpr int64_t kQ8GroupBlockBytes = 272;
inline constexpr int64_t GroupBlockBytes(QuantType t) {
  return t == QuantType::kQ4_0 ? kQ4GroupBlockBytes : kQ8GroupBlockBytes;
}
// Eight rows' blocks of type kType (row_bytes apart, `blocks` each) as
// grouped blocks at `out` (blocks * GroupBlockBytes(kType) bytes).
template <QuantType kType>
inline void GroupBlocks(const uint8_t* rows, int64_t row_bytes, int64_t blocks, uint8_t* out) {
  constexpr int64_t kChunks = (QuantBlockBytes(kType) - 2) / 4;
  for (int64_t b = 0; b < blocks; ++b, out += GroupBlockBytes(kType)) {
    for (int64_t r = 0; r < kQ4GroupRows; ++r) {
      const uint8_t* block = rows + r * row_bytes + b * QuantBlockBytes(kType);
      std::memcpy(out + 2 * r, block, 2);
      for (int j = 0; j < kChunks; ++j) {
        std::memcpy(out + 16 + 32 * j + 4 * r, block + 2 + 4 * j, 4);
      }
    }
  }
}
// Row r's block (kQ4BlockBytes) out of a grouped block.
inline void UngroupQ4Block(const uint8_t* group_block, int64_t r, uint8_t* block) {
  std::memcpy(block, group_block + 2 * r, 2);
  for (int j = 0; j < 4; ++j) std::memcpy(block + 2 + 4 * j, group_block + 16 + 32 * j + 4 * r, 4);
}
bool QuantGrouped(const torch::Tensor& w);  // [rows / 8, blocks, 144] uint8
int64_t QuantRows(const torch::Tensor& w);  // a matrix's rows, in any stored form
bool QuantGroupsRowsHere();                 // whether this CPU's kernels read groups
// w (Q4_0, contiguous, in the row form) regrouped in place, the same
// storage viewed as [rows / 8, blocks, 144]. False, w untouched, where w is
// not such a matrix or its rows are not a multiple of 8. Every path reads
// the grouped form (the portable loop too); a decoder groups its matrices
// only where QuantGroupsRowsHere().
bool GroupQuantRows(torch::Tensor& w);
// Row r of a quantized matrix in either form, dequantized: QuantColumns(w)
// floats.
void DequantizeMatrixRow(const torch::Tensor& w, int64_t r, float* out);

// The kernels (model/quant_kernels.cc). The best path picks, at run time,
// AVX-512 VNNI, AVX2 (x86), NEON with the 8-bit matrix multiply (SMMLA,
// for two tokens or more), with the dot-product extension or without
// (aarch64), or the portable loop.
const char* QuantKernelName();

// The blocks a prompt's products run in (QuantGemm, QuantGroupsGemm):
// three quarters of the L2 a thread has (util/cpu_caches.h) of
// activations against an eighth of it of weights, whatever core a phone or
// host gives the thread; on a 1 MiB L2 (Zen 4 and 5, Skylake-SP and Ice
// Lake servers) 768 KiB against 128 KiB. Within a block each tile of four
// tokens sweeps the block's weights, which stay in L2; the activations'
// block bounds how often the weights are read again from L3 or memory,
// and every block's first tile pays for that read: a block of few tokens
// (wide rows) pays it often. On one Zen 4 thread (256 tokens, 9-33 MiB of
// grouped Q4_0, paired rounds: bench/quant_gemv --tokens 256 --blocks
// 256:128,512:128,768:128,1024:128) a quarter of the L2 (these blocks
// until 2026-12-07) read 0.84-0.86x the row form's speed at 8192 wide
// and 0.94x at 4096, three quarters 0.95-0.99x and a whole L2 no better;
// prefetching the next block's weights during a block did not close the
// gap (the reads are not the cost; the few tiles are). At 2048 tokens
// the grouped products read 1.04-1.11x as fast as with a quarter, and
// one Zen 5 thread (--l2-kib 256,...,4096) also read the largest blocks
// fastest. Clamped to 32 KiB .. 1 MiB of activations and 16 .. 512 KiB
// of weights; an L2 nobody reports is taken as 1 MiB. Outputs do not
// depend on the blocks.
struct PromptBlocks {
  int64_t act_bytes = 0, weight_bytes = 0;
};
PromptBlocks PromptBlocksForL2(int64_t l2_bytes);
// This process's: sized for KernelCpuCaches().l2 unless SetPromptBlocks
// set others.
PromptBlocks QuantPromptBlocks();
// Benches and tests: prompts run in `blocks` from now on (both sizes
// positive), or in this CPU's again (nullopt). Not while a product runs.
void SetPromptBlocks(std::optional<PromptBlocks> blocks);
// e.g. "768 KiB of activations x 128 KiB of weights (L2 1 MiB, sysfs)",
// for the kernels lines of `hilnas run`, the agents and
// `hilnas agent --check-kernels`.
std::string PromptBlocksDescription();

// y[o] = w[o] . x for rows [first, last) of a quantized matrix of `blocks`
// blocks a row; xq: x as QuantizeActivations made it.
void QuantRowsDot(QuantType t, const uint8_t* w, int64_t blocks, const uint8_t* xq, float* y,
                  int64_t first, int64_t last, KernelPath path = KernelPath::kBest);

// A prompt's activations as the products read them: rows of `blocks` Q8_0
// blocks (QuantizeActivations), and beside them each block's scale as a
// float and the sum of its 32 quants (the Q4_0 kernels' offset term).
// QuantMatmulMany makes the two once a call, for all its matrices and all
// their pieces; QuantGemm and QuantGroupsGemm given bare rows make them on
// every call, for every token (once a piece, that cost one Zen 4 thread 5%
// of a full4 layer's Q4_0 prompt products).
struct QuantActs {
  const uint8_t* q;    // row i's blocks at q + i * stride
  int64_t stride;      // bytes
  const float* d;      // the blocks' scales as floats, [token][block]
  const int32_t* sum;  // the sums of each block's 32 quants, [token][block]
  QuantActs From(int64_t i, int64_t blocks) const {
    return {q + i * stride, stride, d + i * blocks, sum + i * blocks};
  }
};
// d and sum, [tokens][blocks], for `tokens` rows of `blocks` Q8_0 blocks.
void QuantActTerms(const uint8_t* xq, int64_t blocks, int64_t tokens, float* d, int32_t* sum);

// c[i * ldc + o] = w[o] . x_i for tokens i < tokens and rows [first, last):
// xq holds `tokens` rows of activations, each `blocks` Q8_0 blocks. Each
// weight block is unpacked once for four tokens.
void QuantGemm(QuantType t, const uint8_t* w, int64_t blocks, const uint8_t* xq, int64_t tokens,
               float* c, int64_t ldc, int64_t first, int64_t last,
               KernelPath path = KernelPath::kBest);
// The same over activations whose terms are made (x.stride: blocks * 34).
void QuantGemm(QuantType t, const uint8_t* w, int64_t blocks, const QuantActs& x, int64_t tokens,
               float* c, int64_t ldc, int64_t first, int64_t last,
               KernelPath path = KernelPath::kBest);

// QuantGemm over a grouped Q4_0 matrix's groups [first, last): its rows
// 8 * first .. 8 * last - 1, written to c's columns of the same numbers.
void QuantGroupsGemm(const uint8_t* groups, int64_t blocks, const uint8_t* xq, int64_t tokens,
                     float* c, int64_t ldc, int64_t first, int64_t last,
                     KernelPath path = KernelPath::kBest);
void QuantGroupsGemm(const uint8_t* groups, int64_t blocks, const QuantActs& x, int64_t tokens,
                     float* c, int64_t ldc, int64_t first, int64_t last,
                     KernelPath path = KernelPath::kBest);

// The kernels QuantGemm (rows as stored) and QuantGroupsGemm (grouped
// Q4_0) run for `path` on this CPU, chosen once for callers that make many
// calls of one token (a decode product's pieces, each otherwise asking the
// CPU's features and the tensor's form again): with tokens 1, the same
// bits as those two.
struct OneTokenKernels {
  void (*rows)(QuantType t, const uint8_t* w, int64_t blocks, const QuantActs& x, int64_t tokens,
               float* c, int64_t ldc, int64_t first, int64_t last);
  void (*groups)(const uint8_t* groups, int64_t blocks, const QuantActs& x, int64_t tokens,
                 float* c, int64_t ldc, int64_t first, int64_t last);
};
OneTokenKernels QuantOneTokenKernels(KernelPath path);

// WeightGemvsInto (model/gemv.h) for quantized matrices of one type and
// width: x quantized once into a per-thread buffer (no allocation after the
// first call), the products' rows split across libtorch's threads.
void QuantGemvsInto(const GemvProduct* products, size_t n, const float* x, KernelPath path);
// The fewest rows of `cols` weights a thread takes in those products (a
// share of 64 Ki multiply-adds, whatever the bytes).
int64_t QuantGemvGrainRows(int64_t cols);

// x [..., cols] f32 times a quantized w^T: [..., rows] f32. One row of x is
// a GEMV, more a QuantGemm; rows split across libtorch's threads.
torch::Tensor QuantMatmul(const torch::Tensor& x, const torch::Tensor& w);
// x through several quantized matrices of one width (a layer's q, k and v,
// or its gate and up): x quantized once for all of them, each product as
// QuantMatmul's, the same bits.
std::vector<torch::Tensor> QuantMatmulMany(const torch::Tensor& x,
                                           const std::vector<torch::Tensor>& ws);

}  // namespace hilnas

#endif  // HILNAS_MODEL_QUANT_H_
