// The row kernels and ATen helpers of the decoder's layers
// (model/internal/decoder_layers.h).
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "model/blas_core.h"
#include "model/internal/decoder_layers.h"
#include "model/prompt_gemm.h"
#include "model/quant.h"
#include "util/cpu_features.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace hilnas {
namespace decoder_internal {

namespace F = torch::nn::functional;

namespace {

// 1 / RMS(x) with eps, x's squares summed in 16 running sums (lane j takes
// elements j, j + 16, ...) added pairwise at the end: one order on every
// CPU, and a loop the compiler turns into vector adds. One running sum
// waited on each add's latency: 1.2 ms of RMSNorm in a 256-token full4
// prompt on one Zen 5 thread.
float InverseRms(const float* x, int64_t d, double eps) {
  constexpr int kLanes = 16;
  float lane[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) lane[j] += x[i + j] * x[i + j];
  }
  for (; i < d; ++i) lane[i % kLanes] += x[i] * x[i];
  for (int width = kLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) lane[j] += lane[j + width];
  }
  return 1.0f / std::sqrt(lane[0] / static_cast<float>(d) + static_cast<float>(eps));
}

}  // namespace

// RMSNorm in one pass per row for inference (the ATen form below is six
// ops, each a dispatch and a temporary: a fifth of a small model's decode
// step went to per-op cost). Same formula, float accumulation.
void RmsNormRow(const float* x, const float* w, int64_t d, double eps, float* out) {
  const float scale = InverseRms(x, d, eps);
  for (int64_t i = 0; i < d; ++i) out[i] = x[i] * scale * w[i];
}

void UnitRmsRow(const float* x, int64_t d, double eps, float* out) {
  const float scale = InverseRms(x, d, eps);
  for (int64_t i = 0; i < d; ++i) out[i] = x[i] * scale;
}

torch::Tensor InferenceRmsNorm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  RECORD_FUNCTION("hilnas::rms_norm", {});
  const int64_t d = x.size(-1), rows = x.numel() / d;
  torch::Tensor out = torch::empty_like(x);
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, rows, 64, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) RmsNormRow(xp + r * d, wp, d, eps, op + r * d);
  });
  return out;
}

// Modules are built without values: Decoder::Create draws every matrix
// and a checkpoint overwrites them, so the module's own initialisation
// would only write memory twice. Left unwritten, a matrix's pages are not
// resident until drawn, and a model stored as Q4_0 from the start never
// holds all its f32 matrices at once (issue 36: peak RSS of a quantized
// run).
torch::nn::Linear MakeLinear(int64_t in, int64_t out, bool bias) {
  torch::nn::Linear l(torch::nn::LinearOptions(1, 1).bias(bias));
  l->options.in_features(in).out_features(out);
  l->weight.set_data(torch::empty({out, in}));
  if (bias) l->bias.set_data(torch::zeros({out}));
  return l;
}

torch::Tensor WithBias(const torch::Tensor& y, const torch::nn::Linear& linear) {
  if (!linear->bias.defined()) return y;
  return y + linear->bias.to(y.scalar_type());
}

torch::nn::Embedding MakeEmbedding(int64_t rows, int64_t dim) {
  torch::nn::Embedding e(torch::nn::EmbeddingOptions(1, 1));
  e->options.num_embeddings(rows).embedding_dim(dim);
  e->weight.set_data(torch::empty({rows, dim}));
  return e;
}

// x @ w^T for a bias-free projection. One token (decode) is a matrix-vector
// product: BLAS gemv streams the weights 3-4x faster than gemm with M = 1,
// which is what linear() would call (measured: 202048x1024 fp32 head, 2
// threads, OpenBLAS: 18 ms vs 66 ms). Decode is bound by weight bytes.
//
// Weights stored in half precision (Decoder::StoreWeightsAs) are computed
// in x's dtype: a one-token product reads them as they are (WeightGemv,
// half the bytes), a prompt widens the matrix once and multiplies in f32
// (without autograd, through OpenBLAS: each thread widens the rows it
// multiplies, WidenedPromptProduct below).
//
// Otherwise, without autograd, the widened matrix goes into one buffer per thread,
// reused by every projection: a fresh f32 copy per matrix and prompt is
// memory the kernel must fault in and zero each time (glibc hands large
// blocks back on free), which made a fresh process's 256-token f16 prefill
// on 2 threads 1.5x its f32 one (bench/data/runtime-compare.md). Larger
// matrices, and backward, take a copy of their own.
constexpr int64_t kMaxWidenedScratch = int64_t{16} << 20;  // elements: 64 MiB of f32

torch::Tensor Widened(const torch::Tensor& w, torch::ScalarType type) {
  // Backward keeps the widened matrix; a vocabulary-sized head (all-position
  // logits in eval) would pin a gigabyte: both take a copy of their own.
  if (torch::GradMode::is_enabled() || w.numel() > kMaxWidenedScratch) return w.to(type);
  thread_local torch::Tensor scratch;
  if (!scratch.defined() || scratch.scalar_type() != type || scratch.numel() < w.numel()) {
    scratch = torch::empty({w.numel()}, torch::TensorOptions().dtype(type));
  }
  torch::Tensor out = scratch.narrow(0, 0, w.numel()).view(w.sizes());
  if (type == torch::kFloat && w.is_contiguous() &&
      (w.scalar_type() == torch::kHalf || w.scalar_type() == torch::kBFloat16)) {
    WidenInto(w, out.data_ptr<float>());
  } else {
    out.copy_(w);
  }
  return out;
}

// The layout of a weight matrix OwnPromptGemm can read for a prompt of x
// (model/prompt_gemm.h: chosen at run time, on AVX-512 CPUs whose OpenBLAS
// core is narrower), or nothing: then the product goes to OpenBLAS.
std::optional<GemmWeights> OwnGemmWeights(const torch::Tensor& x, const torch::Tensor& w) {
  if (torch::GradMode::is_enabled() || x.scalar_type() != torch::kFloat || w.dim() != 2 ||
      !w.is_contiguous() || !UseOwnPromptGemm()) {
    return std::nullopt;
  }
  return GemmWeightsFor(w.scalar_type());
}

// A prompt product's operands: x's rows as one contiguous [tokens, k]
// matrix, and the output [..., n] they are written to (w [n, k]).
std::pair<torch::Tensor, torch::Tensor> PromptOperands(const torch::Tensor& x,
                                                       const torch::Tensor& w) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = w.size(0);
  return {x.reshape({-1, w.size(1)}).contiguous(), torch::empty(shape, x.options())};
}

// x @ w^T for a prompt: without autograd, f32, through OwnPromptGemm when
// it is chosen (w f32, f16 or bf16: half weights widen a block at a time),
// else PooledSgemm (one thread pool for the prompt's every op); else
// libtorch's matmul.
torch::Tensor PromptProduct(const torch::Tensor& x, const torch::Tensor& w) {
  const std::optional<GemmWeights> own = OwnGemmWeights(x, w);
  if (own || (!torch::GradMode::is_enabled() && x.scalar_type() == torch::kFloat &&
              w.scalar_type() == torch::kFloat && w.dim() == 2 && w.is_contiguous())) {
    RECORD_FUNCTION("hilnas::prompt_mm", {});
    const int64_t n = w.size(0), k = w.size(1);
    const auto [rows, out] = PromptOperands(x, w);
    if (own ? OwnPromptGemm(rows.data_ptr<float>(), w.data_ptr(), *own, rows.size(0), n, k,
                            out.data_ptr<float>())
            : PooledSgemm(rows.data_ptr<float>(), w.data_ptr<float>(), rows.size(0), n, k,
                          out.data_ptr<float>())) {
      return out;
    }
  }
  return torch::matmul(x, w.to(x.scalar_type()).t());
}

// x @ w^T for a prompt over half-precision weights, each thread widening
// the rows it multiplies (PooledSgemmWidened), without autograd, for
// matrices Widened would keep a scratch copy of; nothing where OpenBLAS
// declines or the product splits along x's rows (a prompt longer than w
// has outputs: then Widened, once, and PromptProduct).
std::optional<torch::Tensor> WidenedPromptProduct(const torch::Tensor& x, const torch::Tensor& w) {
  if (torch::GradMode::is_enabled() || x.scalar_type() != torch::kFloat || w.dim() != 2 ||
      !w.is_contiguous() || w.numel() > kMaxWidenedScratch ||
      (w.scalar_type() != torch::kHalf && w.scalar_type() != torch::kBFloat16)) {
    return std::nullopt;
  }
  const int64_t n = w.size(0), k = w.size(1);
  if (x.size(-1) != k || PooledSplitsAlongRows(x.numel() / k, n)) return std::nullopt;
  RECORD_FUNCTION("hilnas::prompt_mm", {});
  const auto [rows, out] = PromptOperands(x, w);
  const bool bf16 = w.scalar_type() == torch::kBFloat16;
  const auto* src = static_cast<const uint16_t*>(w.data_ptr());
  if (!PooledSgemmWidened(
          rows.data_ptr<float>(),
          [&](int64_t first, int64_t last, float* buf) {
            WidenHalves(src + first * k, (last - first) * k, bf16, buf);
          },
          rows.size(0), n, k, out.data_ptr<float>())) {
    return std::nullopt;
  }
  return out;
}

torch::Tensor Project(const torch::Tensor& x, const torch::Tensor& w) {
  if (QuantTypeOf(w)) return QuantMatmul(x, w);
  if (w.scalar_type() != x.scalar_type()) {
    if (x.numel() == w.size(1) && x.scalar_type() == torch::kFloat) {
      std::vector<int64_t> shape = x.sizes().vec();
      shape.back() = w.size(0);
      return WeightGemv(w, x).view(shape);
    }
    if (OwnGemmWeights(x, w)) return PromptProduct(x, w);
    if (std::optional<torch::Tensor> out = WidenedPromptProduct(x, w)) return *out;
    return PromptProduct(x, Widened(w, x.scalar_type()));
  }
  if (x.numel() == w.size(1)) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    if (x.scalar_type() == torch::kFloat) return WeightGemv(w, x).view(shape);
    return torch::mv(w, x.reshape({-1})).view(shape);
  }
  return PromptProduct(x, w);
}

// x through several matrices of the same width, as Project would: one
// float token (decode) takes all the products in one parallel region.
std::vector<torch::Tensor> ProjectMany(const torch::Tensor& x,
                                       const std::vector<torch::Tensor>& ws) {
  std::vector<torch::Tensor> out;
  const int64_t in = QuantTypeOf(ws[0]) ? QuantColumns(ws[0]) : ws[0].size(1);
  if (x.scalar_type() == torch::kFloat && x.numel() == in) {
    out = WeightGemvs(ws, x);
    for (size_t m = 0; m < ws.size(); ++m) {
      std::vector<int64_t> shape = x.sizes().vec();
      shape.back() = QuantRows(ws[m]);
      out[m] = out[m].view(shape);
    }
    return out;
  }
  if (ws.size() > 1 && std::all_of(ws.begin(), ws.end(), [&](const torch::Tensor& w) {
        return QuantTypeOf(w) && QuantColumns(w) == in;
      })) {
    return QuantMatmulMany(x, ws);  // a prompt's activations quantized once
  }
  for (const torch::Tensor& w : ws) out.push_back(Project(x, w));
  return out;
}

torch::Tensor DequantizedRows(const torch::Tensor& table, const torch::Tensor& tokens) {
  const int64_t cols = QuantColumns(table), rows = QuantRows(table);
  const torch::Tensor ids = tokens.to(torch::kLong).contiguous();
  std::vector<int64_t> shape = ids.sizes().vec();
  shape.push_back(cols);
  torch::Tensor out = torch::empty(shape, torch::TensorOptions().dtype(torch::kFloat));
  const int64_t* id = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    TORCH_CHECK(id[i] >= 0 && id[i] < rows, "token ", id[i], " outside the vocabulary");
    DequantizeMatrixRow(table, id[i], out.data_ptr<float>() + i * cols);
  }
  return out;
}

// exp in registers, for the GLU rows below (a decode step's and a
// prompt's): Cephes expf's range reduction (x = n ln 2 + r, ln 2 in two
// parts) and polynomial on |r| <= ln 2 / 2, 2^n built in the exponent
// bits; x clamped to [-87.3, 88] so 2^n stays a normal float (exp(-87.3)
// already leaves 1 + e at 1, and exp(88) makes gate / (1 + e) as near 0 as
// the true value's float). A decode step's FFN ran libm's expf (SwiGLU) or
// tanhf (GELU) once per hidden unit: 3.4 us of a full4 layer's 1536 for
// expf on the Zen 5, 5% of a Q4_0 decode step. Each row's out may alias
// its gate.
constexpr float kExpLo = -87.3365447f, kExpHi = 88.0f, kLog2e = 1.44269504f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) inline __m256 ExpAvx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kExpLo)), _mm256_set1_ps(kExpHi));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpP[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpP[i]));
  const __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

#elif defined(__aarch64__)
inline float32x4_t ExpNeon(float32x4_t x) {
  x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(kExpLo)), vdupq_n_f32(kExpHi));
  const float32x4_t n = vrndnq_f32(vmulq_n_f32(x, kLog2e));
  float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(kLn2Hi));
  r = vfmsq_f32(r, n, vdupq_n_f32(kLn2Lo));
  float32x4_t p = vdupq_n_f32(kExpP[0]);
  for (int i = 1; i < 6; ++i) p = vfmaq_f32(vdupq_n_f32(kExpP[i]), p, r);
  const float32x4_t y = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), p, vmulq_f32(r, r));
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  return vmulq_f32(y, vreinterpretq_f32_s32(e));
}

#endif

// out = gate / (1 + exp(a)) * up, a = -gate for SwiGLU; for Gemma's GELU
// (tanh form) a = -2y, y = sqrt(2 / pi) (gate + 0.044715 gate^3), since
// 0.5 (1 + tanh(y)) = 1 / (1 + exp(-2y)). The vector loops take exp in
// registers (above); their tails and the portable loop libm's formula.
enum class Glu { kSwi, kGe };
constexpr float kSqrt2OverPi = 0.7978845608028654f;

template <Glu kKind>
inline float Glu1(float g, float up) {
  if constexpr (kKind == Glu::kSwi) return g / (1.0f + std::exp(-g)) * up;
  return 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * up;
}

#if defined(__x86_64__)
template <Glu kKind>
__attribute__((target("avx2,fma"))) void GluAvx2(const float* gate, const float* up, int64_t n,
                                                 float* out) {
  int64_t i = 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    __m256 a = _mm256_sub_ps(_mm256_setzero_ps(), g);
    if constexpr (kKind == Glu::kGe) {
      const __m256 inner =
          _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), g), _mm256_mul_ps(g, g), g);
      a = _mm256_mul_ps(_mm256_set1_ps(-2.0f * kSqrt2OverPi), inner);
    }
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, ExpAvx2(a))),
                                            _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) out[i] = Glu1<kKind>(gate[i], up[i]);
}
#elif defined(__aarch64__)
template <Glu kKind>
void GluNeon(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  const float32x4_t one = vdupq_n_f32(1.0f);
  for (; i + 4 <= n; i += 4) {
    const float32x4_t g = vld1q_f32(gate + i);
    float32x4_t a = vnegq_f32(g);
    if constexpr (kKind == Glu::kGe) {
      const float32x4_t inner = vfmaq_f32(g, vmulq_n_f32(g, 0.044715f), vmulq_f32(g, g));
      a = vmulq_n_f32(inner, -2.0f * kSqrt2OverPi);
    }
    vst1q_f32(out + i, vmulq_f32(vdivq_f32(g, vaddq_f32(one, ExpNeon(a))), vld1q_f32(up + i)));
  }
  for (; i < n; ++i) out[i] = Glu1<kKind>(gate[i], up[i]);
}
#endif

template <Glu kKind>
void GluRow(const float* gate, const float* up, int64_t n, float* out) {
#if defined(__x86_64__)
  if (KernelCpuFeatures().Avx2FmaF16c()) return GluAvx2<kKind>(gate, up, n, out);
#elif defined(__aarch64__)
  if (KernelCpuFeatures().neon) return GluNeon<kKind>(gate, up, n, out);
#endif
  for (int64_t i = 0; i < n; ++i) out[i] = Glu1<kKind>(gate[i], up[i]);
}

void SwiGluRow(const float* gate, const float* up, int64_t n, float* out) {
  GluRow<Glu::kSwi>(gate, up, n, out);
}

void GeGluRow(const float* gate, const float* up, int64_t n, float* out) {
  GluRow<Glu::kGe>(gate, up, n, out);
}

namespace {

// Inference's GLU in one pass over a contiguous f32 gate and up, into gate,
// in pieces of whole 64-float spans across libtorch's threads (a token's
// row on the caller): each element meets the same code whatever the split,
// so a prompt's result does not depend on the thread count. ATen's
// silu_ then mul_ took 1.55 ms of a 256-token full4 prompt on one Zen 5
// thread, this 0.61 (bench/step_profile, Q4_0 weights).
template <Glu kKind>
torch::Tensor GluInference(torch::Tensor gate, const torch::Tensor& up) {
  RECORD_FUNCTION("hilnas::glu", {});
  float* g = gate.data_ptr<float>();
  const float* u = up.data_ptr<float>();
  const int64_t n = gate.numel(), span = 64;
  at::parallel_for(0, (n + span - 1) / span, 256, [&](int64_t first, int64_t last) {
    const int64_t begin = first * span, end = std::min(n, last * span);
    GluRow<kKind>(g + begin, u + begin, end - begin, g + begin);
  });
  return gate;
}

bool GluInPlace(const torch::Tensor& gate, const torch::Tensor& up) {
  return !torch::GradMode::is_enabled() && gate.scalar_type() == torch::kFloat &&
         up.scalar_type() == torch::kFloat && gate.sizes() == up.sizes() && gate.is_contiguous() &&
         up.is_contiguous();
}

}  // namespace

torch::Tensor SwiGlu(torch::Tensor gate, torch::Tensor up) {
  if (GluInPlace(gate, up)) return GluInference<Glu::kSwi>(std::move(gate), up);
  if (torch::GradMode::is_enabled()) return F::silu(gate) * up;
  return torch::silu_(gate).mul_(up);
}

torch::Tensor GeGlu(torch::Tensor gate, torch::Tensor up) {
  if (GluInPlace(gate, up)) return GluInference<Glu::kGe>(std::move(gate), up);
  const auto tanh_gelu = F::GELUFuncOptions().approximate("tanh");
  if (torch::GradMode::is_enabled()) return F::gelu(gate, tanh_gelu) * up;
  return F::gelu(gate, tanh_gelu).mul_(up);
}

// A sliding-window layer's cache is a ring of min(capacity, window) slots
// along `dim`: position p lives in slot p % slots, so the layer holds what
// KvCacheBytes counts for it (issue 22). Full layers use the same indexing
// with slots == capacity, which never wraps.

// Positions [from, to) of `ring` in position order (to - from <= slots): a
// view when they do not wrap, else a copy of the two pieces.
torch::Tensor ReadRing(const torch::Tensor& ring, int dim, int64_t from, int64_t to) {
  const int64_t slots = ring.size(dim), n = to - from;
  const int64_t s0 = n > 0 ? from % slots : 0, first = std::min(n, slots - s0);
  torch::Tensor head = ring.narrow(dim, s0, first);
  if (first == n) return head;
  return torch::cat({head, ring.narrow(dim, 0, n - first)}, dim);
}

// Writes `x`, positions start..start+x.size(dim)-1, into `ring`; of a chunk
// longer than the ring only its last `slots` positions are kept.
void WriteRing(torch::Tensor& ring, int dim, int64_t start, const torch::Tensor& x) {
  const int64_t slots = ring.size(dim), t = x.size(dim);
  const int64_t keep = std::min(t, slots), from = start + t - keep;
  const torch::Tensor src = x.narrow(dim, t - keep, keep);
  const int64_t s0 = from % slots, first = std::min(keep, slots - s0);
  ring.narrow(dim, s0, first).copy_(src.narrow(dim, 0, first));
  if (first < keep) ring.narrow(dim, 0, keep - first).copy_(src.narrow(dim, first, keep - first));
}

// Copies positions [begin, end) between two rings of the same shape.
void CopyRing(torch::Tensor& to, const torch::Tensor& from, int dim, int64_t begin, int64_t end) {
  const int64_t slots = to.size(dim);
  for (int64_t p = std::max(begin, end - slots); p < end;) {
    const int64_t s0 = p % slots, n = std::min(end - p, slots - s0);
    to.narrow(dim, s0, n).copy_(from.narrow(dim, s0, n));
    p += n;
  }
}

torch::Tensor ToCacheForm(const torch::Tensor& x, torch::Dtype storage) {
  if (storage != torch::kByte) return x.to(storage);
  const int64_t hd = x.size(-1), bytes = hd / kQuantBlock * kQ8BlockBytes;
  TORCH_CHECK(hd % kQuantBlock == 0, "a Q8_0 cache stores rows of whole blocks, not ", hd);
  const torch::Tensor src = x.to(torch::kFloat).contiguous();
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = bytes;
  torch::Tensor out = torch::empty(shape, torch::kByte);
  const float* xp = src.data_ptr<float>();
  uint8_t* op = out.data_ptr<uint8_t>();
  at::parallel_for(0, src.numel() / hd, 256, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) QuantizeActivationsFast(xp + r * hd, hd, op + r * bytes);
  });
  return out;
}

bool WriteCacheRows(const torch::Tensor& x, torch::Tensor& cache, int64_t start) {
  if (torch::GradMode::is_enabled() || x.scalar_type() != torch::kFloat || x.dim() != 4 ||
      x.stride(3) != 1 || x.size(3) < 1 || cache.dim() != 4 || !cache.is_contiguous()) {
    return false;
  }
  const int64_t b = x.size(0), kvh = x.size(1), t = x.size(2), hd = x.size(3);
  const torch::ScalarType type = cache.scalar_type();
  int64_t row_bytes;  // one position's row in the cache
  if (type == torch::kFloat) {
    row_bytes = hd * 4;
  } else if (type == torch::kHalf) {
    row_bytes = hd * 2;
  } else if (type == torch::kByte && hd % kQuantBlock == 0) {
    row_bytes = hd / kQuantBlock * kQ8BlockBytes;
  } else {
    return false;
  }
  RECORD_FUNCTION("hilnas::cache_write", {});
  const int64_t capacity = cache.size(2);
  TORCH_CHECK(cache.size(0) == b && cache.size(1) == kvh &&
                  cache.size(3) * cache.element_size() == row_bytes,
              "WriteCacheRows: rows ", x.sizes(), " for a cache ", cache.sizes(), " of ", type);
  TORCH_CHECK(start >= 0 && start + t <= capacity, "WriteCacheRows: positions ", start, "..",
              start + t, " past the cache's ", capacity);
  const float* xp = x.data_ptr<float>();
  auto* base = static_cast<uint8_t*>(cache.data_ptr());
  const int64_t s0 = x.stride(0), s1 = x.stride(1), s2 = x.stride(2);
  // A share reads at least 1 MiB of f32 rows: the pass is bound by memory
  // (about 60 us for a 2048-token chunk of full4's 2 KV heads on one Zen 5
  // thread). Split into 256-row shares on 2 threads it gained nothing in
  // TTFT (266-293 ms either way, `hilnas run`) and read 5.8-8.4 ms a step
  // under step_profile's hooks against 1.4 on the caller alone.
  const int64_t grain = std::max<int64_t>(256, (int64_t{1} << 20) / (hd * 4));
  at::parallel_for(0, b * kvh * t, grain, [&](int64_t first, int64_t last) {
    for (int64_t r = first; r < last; ++r) {
      const int64_t p = r % t, j = r / t % kvh, bi = r / t / kvh;
      const float* src = xp + bi * s0 + j * s1 + p * s2;
      uint8_t* dst = base + ((bi * kvh + j) * capacity + start + p) * row_bytes;
      if (type == torch::kFloat) {
        std::memcpy(dst, src, row_bytes);
      } else if (type == torch::kHalf) {
        NarrowToHalves(src, hd, reinterpret_cast<uint16_t*>(dst));
      } else {
        QuantizeActivationsFast(src, hd, dst);
      }
    }
  });
  return true;
}

torch::Tensor FromCacheForm(const torch::Tensor& cached, int64_t hd) {
  if (cached.scalar_type() != torch::kByte) return cached.to(torch::kFloat);
  TORCH_CHECK(cached.size(-1) == hd / kQuantBlock * kQ8BlockBytes, "Q8_0 rows of ", cached.size(-1),
              " bytes for head_dim ", hd);
  std::vector<int64_t> shape = cached.sizes().vec();
  shape.back() = hd;
  // Rows of hd / 32 blocks are the rows of a quantized matrix.
  return DequantizeMatrix(cached.contiguous().view({-1, hd / kQuantBlock, kQ8BlockBytes}))
      .view(shape);
}

// Rotary embedding in the Hugging Face "rotate half" layout: dimension i is
// paired with i + head_dim/2. One head's row; out must not alias x.
void RopeRow(const float* x, const float* c, const float* sn, int64_t hd, float* out) {
  const int64_t half = hd / 2;
  for (int64_t i = 0; i < half; ++i) {
    out[i] = x[i] * c[i] + (-x[i + half]) * sn[i];
    out[i + half] = x[i + half] * c[i + half] + x[i] * sn[i + half];
  }
}

bool NormRopeHeadsFirstApplies(const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& cos, const torch::Tensor& sin) {
  return !torch::GradMode::is_enabled() && x.scalar_type() == torch::kFloat && x.dim() == 4 &&
         x.is_contiguous() && w.scalar_type() == torch::kFloat && w.is_contiguous() &&
         w.numel() == x.size(3) && cos.scalar_type() == torch::kFloat &&
         sin.scalar_type() == torch::kFloat && cos.is_contiguous() && sin.is_contiguous() &&
         cos.numel() == x.size(1) * x.size(3) && sin.numel() == cos.numel();
}

torch::Tensor NormRopeHeadsFirst(const torch::Tensor& x, const torch::Tensor& w, double eps,
                                 const torch::Tensor& cos, const torch::Tensor& sin) {
  TORCH_CHECK(NormRopeHeadsFirstApplies(x, w, cos, sin), "NormRopeHeadsFirst: x [B, T, H, hd] ",
              x.sizes(), " float and contiguous, w [hd], cos/sin [T, hd] float");
  RECORD_FUNCTION("hilnas::qk_norm_rope", {});
  const int64_t b = x.size(0), t = x.size(1), h = x.size(2), hd = x.size(3);
  torch::Tensor out = torch::empty({b, h, t, hd}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = w.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  float* op = out.data_ptr<float>();
  at::parallel_for(0, b * t, 16, [&](int64_t first, int64_t last) {
    std::vector<float> normed(static_cast<size_t>(hd));
    for (int64_t bt = first; bt < last; ++bt) {
      const int64_t bi = bt / t, p = bt % t;
      for (int64_t head = 0; head < h; ++head) {
        RmsNormRow(xp + (bt * h + head) * hd, wp, hd, eps, normed.data());
        RopeRow(normed.data(), cp + p * hd, sp + p * hd, hd, op + ((bi * h + head) * t + p) * hd);
      }
    }
  });
  return out;
}

torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  if (!torch::GradMode::is_enabled() && x.scalar_type() == torch::kFloat && x.is_contiguous() &&
      x.dim() == 4 && cos.is_contiguous() && sin.is_contiguous() &&
      cos.scalar_type() == torch::kFloat) {
    // Inference: one pass instead of five ops; the same products and sums.
    // x [B, T, H, hd], cos/sin [1, T, 1, hd].
    RECORD_FUNCTION("hilnas::rope", {});
    const int64_t b = x.size(0), t = x.size(1), h = x.size(2), hd = x.size(3);
    torch::Tensor out = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* cp = cos.data_ptr<float>();
    const float* sp = sin.data_ptr<float>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, b * t, 16, [&](int64_t first, int64_t last) {
      for (int64_t bt = first; bt < last; ++bt) {
        const float* c = cp + (bt % t) * hd;
        const float* sn = sp + (bt % t) * hd;
        for (int64_t head = 0; head < h; ++head) {
          RopeRow(xp + (bt * h + head) * hd, c, sn, hd, op + (bt * h + head) * hd);
        }
      }
    });
    return out;
  }
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  return x * cos + torch::cat({-x2, x1}, -1) * sin;
}

}  // namespace decoder_internal
}  // namespace hilnas
