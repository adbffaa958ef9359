#include "model/quant.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/work_split.h"
#include "util/aligned.h"

// Built with -ffp-contract=off (model/CMakeLists.txt): x * id + 8.5 must
// round twice, as llama.cpp's reference quantizer on x86 rounds it, not
// once as a fused multiply-add would on aarch64.

namespace hilnas {
namespace {

inline uint16_t HalfBits(float f) { return c10::Half(f).x; }
inline void StoreHalf(uint8_t* p, float f) {
  const uint16_t h = HalfBits(f);
  std::memcpy(p, &h, 2);
}

void QuantizeBlockQ8(const float* x, uint8_t* out) {
  float amax = 0;
  for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  StoreHalf(out, d);
  for (int j = 0; j < kQuantBlock; ++j) {
    out[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
  }
}

void QuantizeBlockQ4(const float* x, uint8_t* out) {
  float amax = 0, max = 0;
  for (int j = 0; j < kQuantBlock; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8;
  const float id = d != 0 ? 1.0f / d : 0.0f;
  StoreHalf(out, d);
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    const float x0 = x[j] * id, x1 = x[kQuantBlock / 2 + j] * id;
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x0 + 8.5f)));
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x1 + 8.5f)));
    out[2 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

}  // namespace

const char* QuantTypeName(QuantType t) { return t == QuantType::kQ4_0 ? "q4_0" : "q8_0"; }

std::optional<QuantType> ParseQuantType(absl::string_view name) {
  if (name == "q4_0") return QuantType::kQ4_0;
  if (name == "q8_0") return QuantType::kQ8_0;
  return std::nullopt;
}

void QuantizeRow(QuantType t, const float* x, int64_t n, uint8_t* out) {
  const int64_t bs = QuantBlockBytes(t);
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    if (t == QuantType::kQ4_0) {
      QuantizeBlockQ4(x + b * kQuantBlock, out + b * bs);
    } else {
      QuantizeBlockQ8(x + b * kQuantBlock, out + b * bs);
    }
  }
}

void DequantizeRow(QuantType t, const uint8_t* q, int64_t n, float* out) {
  const int64_t bs = QuantBlockBytes(t);
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const uint8_t* blk = q + b * bs;
    const float d = BlockScale(blk);
    float* o = out + b * kQuantBlock;
    if (t == QuantType::kQ8_0) {
      for (int j = 0; j < kQuantBlock; ++j) o[j] = d * static_cast<int8_t>(blk[2 + j]);
    } else {
      for (int j = 0; j < kQuantBlock / 2; ++j) {
        o[j] = d * ((blk[2 + j] & 15) - 8);
        o[j + kQuantBlock / 2] = d * ((blk[2 + j] >> 4) - 8);
      }
    }
  }
}

void QuantizeActivations(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    uint8_t* blk = out + b * kQ8BlockBytes;
    float amax = 0;
    for (int j = 0; j < kQuantBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float id = amax != 0 ? 127.0f / amax : 0.0f;
    StoreHalf(blk, amax / 127.0f);
    for (int j = 0; j < kQuantBlock; ++j) {
      blk[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(xb[j] * id)));
    }
  }
}

absl::StatusOr<torch::Tensor> QuantizeMatrix(const torch::Tensor& w, QuantType t) {
  if (w.dim() != 2 || w.scalar_type() != torch::kFloat) {
    return absl::InvalidArgumentError("QuantizeMatrix: w must be a 2-D f32 matrix");
  }
  const int64_t rows = w.size(0), cols = w.size(1);
  if (cols % kQuantBlock != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", rows, " x ", cols, " matrix cannot be stored as ", QuantTypeName(t),
                     ": its width ", cols, " is not a multiple of the block size ", kQuantBlock));
  }
  const torch::Tensor wc = w.contiguous();
  const int64_t blocks = cols / kQuantBlock, bs = QuantBlockBytes(t);
  torch::Tensor q = torch::empty({rows, blocks, bs}, torch::TensorOptions().dtype(torch::kUInt8));
  const float* src = wc.data_ptr<float>();
  uint8_t* dst = q.data_ptr<uint8_t>();
  at::parallel_for(0, rows, 64, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r)
      QuantizeRow(t, src + r * cols, cols, dst + r * blocks * bs);
  });
  return q;
}

std::optional<QuantType> QuantTypeOf(const torch::Tensor& w) {
  if (!w.defined() || w.dim() != 3 || w.scalar_type() != torch::kUInt8) return std::nullopt;
  if (w.size(2) == kQ4BlockBytes || w.size(2) == kQ4GroupBlockBytes) return QuantType::kQ4_0;
  if (w.size(2) == kQ8BlockBytes) return QuantType::kQ8_0;
  return std::nullopt;
}

bool QuantGrouped(const torch::Tensor& w) {
  return w.defined() && w.dim() == 3 && w.scalar_type() == torch::kUInt8 &&
         w.size(2) == kQ4GroupBlockBytes;
}

int64_t QuantRows(const torch::Tensor& w) {
  return QuantGrouped(w) ? w.size(0) * kQ4GroupRows : w.size(0);
}

bool GroupQuantRows(torch::Tensor& w) {
  if (QuantTypeOf(w) != QuantType::kQ4_0 || QuantGrouped(w) || !w.is_contiguous() ||
      w.size(0) % kQ4GroupRows != 0) {
    return false;
  }
  const int64_t groups = w.size(0) / kQ4GroupRows, blocks = w.size(1);
  const int64_t row_bytes = blocks * kQ4BlockBytes, group_bytes = kQ4GroupRows * row_bytes;
  uint8_t* data = w.data_ptr<uint8_t>();
  // Each group's eight rows are copied aside, then written back grouped
  // over themselves: the same bytes, so the same storage holds them.
  at::parallel_for(0, groups, 16, [&](int64_t first, int64_t last) {
    std::vector<uint8_t> rows(static_cast<size_t>(group_bytes));
    for (int64_t k = first; k < last; ++k) {
      uint8_t* group = data + k * group_bytes;
      std::memcpy(rows.data(), group, rows.size());
      GroupBlocks<QuantType::kQ4_0>(rows.data(), row_bytes, blocks, group);
    }
  });
  w.set_data(w.view({groups, blocks, kQ4GroupBlockBytes}));
  return true;
}

void DequantizeMatrixRow(const torch::Tensor& w, int64_t r, float* out) {
  const QuantType t = QuantTypeOf(w).value();
  const int64_t blocks = w.size(1);
  const uint8_t* data = w.data_ptr<uint8_t>();
  if (!QuantGrouped(w))
    return DequantizeRow(t, data + r * blocks * w.size(2), blocks * kQuantBlock, out);
  const uint8_t* group = data + r / kQ4GroupRows * blocks * kQ4GroupBlockBytes;
  uint8_t block[kQ4BlockBytes];
  for (int64_t b = 0; b < blocks; ++b) {
    UngroupQ4Block(group + b * kQ4GroupBlockBytes, r % kQ4GroupRows, block);
    DequantizeRow(t, block, kQuantBlock, out + b * kQuantBlock);
  }
}

torch::Tensor DequantizeMatrix(const torch::Tensor& q) {
  const int64_t rows = QuantRows(q), cols = QuantColumns(q);
  torch::Tensor out = torch::empty({rows, cols}, torch::TensorOptions().dtype(torch::kFloat));
  const torch::Tensor qc = q.contiguous();
  float* dst = out.data_ptr<float>();
  at::parallel_for(0, rows, 64, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) DequantizeMatrixRow(qc, r, dst + r * cols);
  });
  return out;
}

namespace {

// A prompt's product splits its rows in multiples of this (whole groups of
// eight of a grouped Q4_0 matrix, whole SMMLA and tile rows), and no finer.
constexpr int64_t kGemmRows = 32;

// A thread takes at least this many of a decode product's weights. The
// float GEMV's rule is in bytes (256 KiB: 64 Ki f32 weights, model/gemv.cc);
// in bytes a Q4_0 matrix is 7x smaller for the same multiply-adds, and at
// 256 KiB full4's fused q/k/v (768 x 512) and its o projection never split:
// 2-thread Q4_0 decode at depth 2048 spent 0.39 ms a step in products,
// 0.30-0.31 at 64 KiB, 32 KiB or 16 KiB (bench/step_profile, Zen 4). So the
// rule counts weights: 64 Ki, the f32 GEMV's.
constexpr int64_t kQuantGemvGrainWeights = int64_t{64} << 10;

}  // namespace

int64_t QuantGemvGrainRows(int64_t cols) {
  return std::max<int64_t>(16, kQuantGemvGrainWeights / std::max<int64_t>(cols, 1));
}

namespace {

// The first group of a grouped matrix whose first row is `row` or after.
int64_t GroupFrom(int64_t row) { return (row + kQ4GroupRows - 1) / kQ4GroupRows; }

// c[i * ldc + o] = w[o] . x_i for rows o in [first, last) of w in either
// form. A grouped matrix computes the groups whose first row lies in
// [first, last), whole (their rows past `last` too): any split of a
// matrix's rows into ranges computes each group once. x comes with its
// terms, made once by the caller for every range.
void QuantRowsInto(const torch::Tensor& w, const QuantActs& x, int64_t tokens, float* c,
                   int64_t ldc, int64_t first, int64_t last, KernelPath path) {
  const int64_t blocks = w.size(1);
  const uint8_t* data = w.data_ptr<uint8_t>();
  if (!QuantGrouped(w)) {
    return QuantGemm(*QuantTypeOf(w), data, blocks, x, tokens, c, ldc, first, last, path);
  }
  const int64_t g0 = GroupFrom(first), g1 = GroupFrom(last);
  if (g0 < g1) QuantGroupsGemm(data, blocks, x, tokens, c, ldc, g0, g1, path);
}

}  // namespace

void QuantGemvsInto(const GemvProduct* products, size_t n, const float* x, KernelPath path) {
  const torch::Tensor& w0 = *products[0].w;
  const QuantType t = QuantTypeOf(w0).value();
  const int64_t blocks = w0.size(1);
  // Each matrix's rows, data and form, read once here: the pieces below
  // call the kernels with no tensor in between.
  int64_t rows[8];
  const uint8_t* data[8];
  bool grouped[8];
  TORCH_CHECK(n <= 8, "WeightGemv: at most 8 products a call, not ", n);
  for (size_t m = 0; m < n; ++m) {
    const torch::Tensor& w = *products[m].w;
    TORCH_CHECK(QuantTypeOf(w) == t && w.size(1) == blocks && w.is_contiguous(),
                "WeightGemv: quantized matrices must be contiguous, of one type and width");
    rows[m] = QuantRows(w);
    data[m] = w.data_ptr<uint8_t>();
    grouped[m] = QuantGrouped(w);
  }
  const OneTokenKernels kernels = QuantOneTokenKernels(path);
  // x as Q8_0 blocks and their terms (scales as floats, sums), made once
  // on the caller: a kernel given bare blocks makes the terms each call,
  // and the spin pool runs a share in up to 8 calls (full4's down
  // product, 48 blocks: about 0.28 us a call against 5 for half its rows).
  thread_local AlignedVector<uint8_t> xq;
  thread_local AlignedVector<float> xd;
  thread_local AlignedVector<int32_t> xs;
  xq.resize(static_cast<size_t>(blocks * kQ8BlockBytes));
  xd.resize(static_cast<size_t>(blocks));
  xs.resize(static_cast<size_t>(blocks));
  QuantizeActivationsFast(x, blocks * kQuantBlock, xq.data());
  QuantActTerms(xq.data(), blocks, 1, xd.data(), xs.data());
  const QuantActs acts{xq.data(), blocks * kQ8BlockBytes, xd.data(), xs.data()};
  ParallelForRowsOf({rows, n}, QuantGemvGrainRows(blocks * kQuantBlock),
                    [&](size_t m, int64_t first, int64_t last) {
                      if (!grouped[m]) {
                        return kernels.rows(t, data[m], blocks, acts, 1, products[m].y, 0, first,
                                            last);
                      }
                      // The groups whose first row is in [first, last), as QuantRowsInto.
                      const int64_t g0 = GroupFrom(first), g1 = GroupFrom(last);
                      if (g0 < g1) {
                        kernels.groups(data[m], blocks, acts, 1, products[m].y, 0, g0, g1);
                      }
                    });
}

namespace {

// A prompt's products over a call's matrices (QuantMatmulMany): outs[m]
// [tokens, rows of ws[m]] = x ws[m]^T. Every matrix's rows in one split,
// taken by demand (ParallelChunks): one hand-over a call where there was
// one a matrix (a layer's q, k and v; its gate and up), and a thread that
// runs slower (a vCPU whose host core is busy; a phone's little core)
// takes fewer pieces instead of holding the others at a matrix's end.
// About four pieces a thread a matrix, in kGemmRows (one a matrix on one
// thread): each piece streams the prompt's activations through its blocks
// once (GroupsInBlocks), a small cost against its rows' products.
void PromptProducts(const std::vector<torch::Tensor>& ws, const QuantActs& x, int64_t tokens,
                    std::vector<torch::Tensor>& outs) {
  struct Piece {
    size_t m;
    int64_t first, last;
  };
  std::vector<Piece> pieces;
  const int threads = at::get_num_threads();
  for (size_t m = 0; m < ws.size(); ++m) {
    const int64_t rows = QuantRows(ws[m]);
    const int64_t chunk = ChunkFor(rows, threads, threads > 1 ? 4 : 1, kGemmRows, kGemmRows, rows);
    for (int64_t r = 0; r < rows; r += chunk) pieces.push_back({m, r, std::min(rows, r + chunk)});
  }
  ParallelChunks(static_cast<int64_t>(pieces.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last; ++i) {
      const Piece& p = pieces[static_cast<size_t>(i)];
      QuantRowsInto(ws[p.m], x, tokens, outs[p.m].data_ptr<float>(), outs[p.m].size(1), p.first,
                    p.last, KernelPath::kBest);
    }
  });
}

}  // namespace

std::vector<torch::Tensor> QuantMatmulMany(const torch::Tensor& x,
                                           const std::vector<torch::Tensor>& ws) {
  RECORD_FUNCTION("hilnas::quant_matmul", {});
  TORCH_CHECK(!ws.empty(), "QuantMatmul: no matrices");
  for (const torch::Tensor& w : ws) {
    TORCH_CHECK(QuantTypeOf(w).has_value(), "QuantMatmul: w is not a quantized matrix");
  }
  const int64_t cols = QuantColumns(ws[0]), blocks = ws[0].size(1);
  for (const torch::Tensor& w : ws) {
    TORCH_CHECK(QuantColumns(w) == cols && w.size(1) == blocks,
                "QuantMatmul: matrices of one product must share their width");
  }
  TORCH_CHECK(x.size(-1) == cols, "QuantMatmul: x has ", x.size(-1), " columns, w ", cols);
  const torch::Tensor xf = x.reshape({-1, cols}).to(torch::kFloat).contiguous();
  const int64_t tokens = xf.size(0);
  std::vector<torch::Tensor> wcs, outs;
  for (const torch::Tensor& w : ws) {
    wcs.push_back(w.contiguous());
    outs.push_back(
        torch::empty({tokens, QuantRows(w)}, torch::TensorOptions().dtype(torch::kFloat)));
  }
  const bool one_type = std::all_of(ws.begin(), ws.end(), [&](const torch::Tensor& w) {
    return QuantTypeOf(w) == QuantTypeOf(ws[0]);
  });
  if (tokens == 1 && one_type && ws.size() <= 8) {
    // One token: the decode step's products (QuantGemvsInto), every
    // matrix's rows in one split. (Mixed types, or more matrices than it
    // takes, go through the prompt's products, the same bits a row.)
    std::vector<GemvProduct> products;
    for (size_t m = 0; m < wcs.size(); ++m) {
      products.push_back({&wcs[m], outs[m].data_ptr<float>()});
    }
    QuantGemvsInto(products.data(), products.size(), xf.data_ptr<float>(), KernelPath::kBest);
  } else {
    // Activations once for every matrix, as Q8_0 rows with their terms
    // (QuantActs), once for every piece of every matrix.
    AlignedVector<uint8_t> xq(static_cast<size_t>(tokens * blocks * kQ8BlockBytes));
    AlignedVector<float> xd(static_cast<size_t>(tokens * blocks));
    AlignedVector<int32_t> xs(xd.size());
    const float* xp = xf.data_ptr<float>();
    at::parallel_for(0, tokens, 16, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        uint8_t* row = xq.data() + i * blocks * kQ8BlockBytes;
        QuantizeActivationsFast(xp + i * cols, cols, row);
        QuantActTerms(row, blocks, 1, &xd[i * blocks], &xs[i * blocks]);
      }
    });
    const QuantActs acts{xq.data(), blocks * kQ8BlockBytes, xd.data(), xs.data()};
    PromptProducts(wcs, acts, tokens, outs);
  }
  for (size_t m = 0; m < outs.size(); ++m) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = outs[m].size(1);
    outs[m] = outs[m].view(shape).to(x.scalar_type());
  }
  return outs;
}

torch::Tensor QuantMatmul(const torch::Tensor& x, const torch::Tensor& w) {
  return QuantMatmulMany(x, {w})[0];
}

}  // namespace hilnas
