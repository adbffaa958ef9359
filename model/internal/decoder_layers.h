// The decoder's layers as libtorch modules (RMSNorm, attention, SwiGLU
// MLP, the layer and the stack: the ATen path every prompt, training step
// and KV-prediction forward takes), the row kernels they share with the
// allocation-free decode step, and DecoderImpl, the module tree a Decoder
// handle owns. Internal to model/: decoder.cc (the Decoder API, caches and
// loading), decoder_layers.cc (the kernels) and decode_step.cc (one token
// in raw loops) include it; nothing else should.
#ifndef HILNAS_MODEL_INTERNAL_DECODER_LAYERS_H_
#define HILNAS_MODEL_INTERNAL_DECODER_LAYERS_H_

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "model/attention.h"
#include "model/decoder.h"
#include "model/gemv.h"
#include "model/quant.h"
#include "model/slim.h"

namespace hilnas {
namespace decoder_internal {

// RMSNorm in one pass per row for inference (the ATen form below is six
// ops, each a dispatch and a temporary: a fifth of a small model's decode
// step went to per-op cost). Same formula, float accumulation.
void RmsNormRow(const float* x, const float* w, int64_t d, double eps, float* out);
// RmsNormRow without a weight (Llama 4's QK-norm); `out` may be `x`.
void UnitRmsRow(const float* x, int64_t d, double eps, float* out);

torch::Tensor InferenceRmsNorm(const torch::Tensor& x, const torch::Tensor& w, double eps);

// A projection (bias-free unless asked: Qwen2's q, k and v) and an
// embedding table, their values not yet written (Decoder::Create draws
// them, a checkpoint fills them). A bias is a vector, never stored in a
// matrix format (StoreWeightsAs converts matrices only).
torch::nn::Linear MakeLinear(int64_t in, int64_t out, bool bias = false);
torch::nn::Embedding MakeEmbedding(int64_t rows, int64_t dim);
// y + the projection's bias, when it has one (y [..., out]).
torch::Tensor WithBias(const torch::Tensor& y, const torch::nn::Linear& linear);

// x @ w^T for a bias-free projection. One token (decode) is a matrix-vector
// product: BLAS gemv streams the weights 3-4x faster than gemm with M = 1,
// which is what linear() would call (measured: 202048x1024 fp32 head, 2
// threads, OpenBLAS: 18 ms vs 66 ms). Decode is bound by weight bytes.
//
// Weights stored in half precision (Decoder::StoreWeightsAs) are computed
// in x's dtype: a one-token product reads them as they are (WeightGemv,
// half the bytes), a prompt widens the matrix once and multiplies in f32.
torch::Tensor Project(const torch::Tensor& x, const torch::Tensor& w);

// x through several matrices of the same width, as Project would: one
// float token (decode) takes all the products in one parallel region.
std::vector<torch::Tensor> ProjectMany(const torch::Tensor& x,
                                       const std::vector<torch::Tensor>& ws);

// Rows `tokens` ([B, T] ids) of a quantized table, f32 [B, T, cols].
torch::Tensor DequantizedRows(const torch::Tensor& table, const torch::Tensor& tokens);

// out = silu(gate) * up, elementwise over n floats (out may alias gate).
void SwiGluRow(const float* gate, const float* up, int64_t n, float* out);

// silu(gate) * up. Without a gradient, in place in gate: contiguous f32
// through the row kernel (SwiGluRow) across libtorch's threads, anything
// else through ATen's silu_ and mul_. A prefill chunk's FFN holds two
// [T, d_ffn] tensors at its peak, not four. Takes both by value: moved in,
// up is released on return.
torch::Tensor SwiGlu(torch::Tensor gate, torch::Tensor up);

// Gemma 3's GeGLU: out = gelu_tanh(gate) * up (Hugging Face's
// gelu_pytorch_tanh), the row kernel and the tensor form as for SwiGLU.
void GeGluRow(const float* gate, const float* up, int64_t n, float* out);
torch::Tensor GeGlu(torch::Tensor gate, torch::Tensor up);

// A sliding-window layer's cache is a ring of min(capacity, window) slots
// along `dim`: position p lives in slot p % slots, so the layer holds what
// KvCacheBytes counts for it (issue 22). Full layers use the same indexing
// with slots == capacity, which never wraps.
// Positions [from, to) of `ring` in position order (to - from <= slots): a
// view when they do not wrap, else a copy of the two pieces.
torch::Tensor ReadRing(const torch::Tensor& ring, int dim, int64_t from, int64_t to);

// Writes `x`, positions start..start+x.size(dim)-1, into `ring`; of a chunk
// longer than the ring only its last `slots` positions are kept.
void WriteRing(torch::Tensor& ring, int dim, int64_t start, const torch::Tensor& x);

// Copies positions [begin, end) between two rings of the same shape.
void CopyRing(torch::Tensor& to, const torch::Tensor& from, int dim, int64_t begin, int64_t end);

// Keys or values [..., hd] in a cache's storage (`storage`, the cache's
// dtype): as they are when it is theirs, f16 for a half cache (Decoder::
// SetKvDtype("f16")), Q8_0 blocks [..., hd / 32 * 34] for a byte cache
// ("q8_0"; each row quantized as llama.cpp's f32 -> q8_0 cache copy does,
// the activation quantizer).
torch::Tensor ToCacheForm(const torch::Tensor& x, torch::Dtype storage);
// Writes keys or values x [B, KVH, T, hd] (f32, each row of hd contiguous,
// any other strides: a prompt's are transposed views) at positions
// start..start+T-1 of a full layer's cache [B, KVH, capacity, row] in its
// storage form, each row converted as ToCacheForm converts it (the same
// bits), in one pass over libtorch's threads. Returns false, writing
// nothing, where it does not apply (autograd on, another dtype or layout):
// then ToCacheForm and a copy. On one Zen 5 thread a 2048-token prefill
// of full4 with an f16 cache spent 3.2-4.0 ms in those conversions and
// copies (64 aten::copy_ a step, step_profile) and spends 1.0 ms here (16
// writes) with the other 32 copies under 0.6 ms: no temporary, one pass.
bool WriteCacheRows(const torch::Tensor& x, torch::Tensor& cache, int64_t start);
// Cached rows back in f32 (f16 widened, Q8_0 blocks dequantized).
torch::Tensor FromCacheForm(const torch::Tensor& cached, int64_t hd);

// Rotary embedding in the Hugging Face "rotate half" layout: dimension i is
// paired with i + head_dim/2. One head's row; out must not alias x.
void RopeRow(const float* x, const float* c, const float* sn, int64_t hd, float* out);

torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

// QK-norm, then RoPE, heads first, in one pass for inference: x [B, T, H,
// hd] (float, contiguous), the norm's scale w [hd], cos/sin [T, hd] ->
// [B, H, T, hd], contiguous. Each head's row goes through RmsNormRow and
// RopeRow, the functions the separate passes run, so the bits are theirs;
// one pass and one split where there were three (the norm, the rotation,
// and attention's copy of the transposed queries), each over the whole
// [T, H * hd] tensor. NormRopeHeadsFirstApplies says where it does.
bool NormRopeHeadsFirstApplies(const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& cos, const torch::Tensor& sin);
torch::Tensor NormRopeHeadsFirst(const torch::Tensor& x, const torch::Tensor& w, double eps,
                                 const torch::Tensor& cos, const torch::Tensor& sin);

// Root-mean-square norm (Zhang & Sennrich) with a learned scale, as in Llama.
struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t dim, double eps) : eps(eps) {
    weight = register_parameter("weight", torch::ones({dim}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (!torch::GradMode::is_enabled() && x.scalar_type() == torch::kFloat &&
        weight.scalar_type() == torch::kFloat && x.is_contiguous()) {
      return InferenceRmsNorm(x, weight, eps);
    }
    auto var = x.pow(2).mean(-1, /*keepdim=*/true);
    return x * torch::rsqrt(var + eps) * weight;
  }
  double eps;
  torch::Tensor weight;
};

TORCH_MODULE(RmsNorm);

struct AttentionBlockImpl : torch::nn::Module {
  AttentionBlockImpl(const Arch& a, Attention type, bool rope) : arch(a), type(type), rope(rope) {
    // Qwen2: q, k and v biased, o not (ValidateArch: never with slim).
    q_proj = register_module("q_proj", MakeLinear(a.d_model, a.q_width(), a.qkv_bias));
    k_proj = register_module("k_proj", MakeLinear(a.d_model, a.kv_width(), a.qkv_bias));
    if (a.kv_cache == KvLayout::kSlim) {
      // Slim Attention Eq. 4: V = K W_KV, stored in place of W_V.
      kv_proj = register_module("kv_proj", MakeLinear(a.kv_width(), a.kv_width()));
    } else {
      v_proj = register_module("v_proj", MakeLinear(a.d_model, a.kv_width(), a.qkv_bias));
    }
    o_proj = register_module("o_proj", MakeLinear(a.q_width(), a.d_model));
    if (a.qk_norm) {
      q_norm = register_module("q_norm", RmsNorm(a.head_dim, a.norm_eps));
      k_norm = register_module("k_norm", RmsNorm(a.head_dim, a.norm_eps));
    }
  }

  // x: [B, T, d] at absolute positions start..start+T-1. With a cache, new
  // K/V are written at `start` and attention reads the cached prefix.
  // `provided` (may be null) replaces the layer's own keys and values.
  torch::Tensor forward(const torch::Tensor& x, int64_t start, const torch::Tensor& cos,
                        const torch::Tensor& sin, torch::Tensor* cache_k, torch::Tensor* cache_v,
                        const LayerKv* provided = nullptr, ForwardObserver* observer = nullptr,
                        int layer = 0) {
    if (kv_proj && provided == nullptr) {
      return SlimForward(x, start, cos, sin, cache_k, observer, layer);
    }
    const int64_t b = x.size(0), t = x.size(1);
    const int64_t h = arch.num_heads, kvh = arch.num_kv_heads, hd = arch.head_dim;
    torch::Tensor q, k, v;
    if (provided != nullptr) {
      q = WithBias(Project(x, q_proj->weight), q_proj);
      k = provided->keys;
      v = provided->values;
    } else {
      auto qkv = ProjectMany(x, {q_proj->weight, k_proj->weight, v_proj->weight});
      q = WithBias(qkv[0], q_proj);
      k = WithBias(qkv[1], k_proj).view({b, t, kvh, hd});
      v = WithBias(qkv[2], v_proj).view({b, t, kvh, hd});
    }
    q = q.view({b, t, h, hd});
    if (observer != nullptr) observer->OnKeysValues(layer, k, v);
    if (FusedNormRope(q, k, cos, sin)) {
      q = NormRopeHeadsFirst(q, q_norm->weight, q_norm->eps, cos, sin);
      k = NormRopeHeadsFirst(k, k_norm->weight, k_norm->eps, cos, sin);
    } else {
      if (arch.qk_norm) q = q_norm(q);
      q = Tempered(Rotated(UnitRms(q), cos, sin).transpose(1, 2), start);
      k = RotatedKeys(k, cos, sin);  // [B, KVH, T, hd]
    }
    v = v.transpose(1, 2);

    // A full layer's keys and values go into its cache in one pass, in the
    // cache's form (--kv-dtype f16|q8_0 included), and are attended to from
    // there, as a later decode step reads them.
    const bool full = cache_k != nullptr && type != Attention::kSlidingWindow;
    // (Where k's rows go in and v's cannot, both take the copies below.)
    const bool written =
        full && WriteCacheRows(k, *cache_k, start) && WriteCacheRows(v, *cache_v, start);
    if (!written && cache_k != nullptr && cache_k->scalar_type() != k.scalar_type()) {
      // A reduced-precision cache: this chunk's keys and values are attended
      // to as the cache holds them.
      k = ToCacheForm(k, cache_k->scalar_type());
      v = ToCacheForm(v, cache_v->scalar_type());
    }
    int64_t key_start = 0;  // absolute position of the first key read
    torch::Tensor keys = k, values = v;
    const int64_t end = start + t;
    if (full) {
      if (!written) {
        cache_k->narrow(2, start, t).copy_(k);
        cache_v->narrow(2, start, t).copy_(v);
      }
      keys = cache_k->narrow(2, 0, end);
      values = cache_v->narrow(2, 0, end);
    } else if (cache_k != nullptr && t == 1) {
      // Decode over the ring: every filled slot is inside the window, and a
      // single query's softmax does not care in which order its keys come,
      // so the slots are read as they lie (positions stand in as if they
      // ended at this query; the kernel needs no mask for one query).
      WriteRing(*cache_k, 2, start, k);
      WriteRing(*cache_v, 2, start, v);
      const int64_t n = std::min(end, cache_k->size(2));
      keys = cache_k->narrow(2, 0, n);
      values = cache_v->narrow(2, 0, n);
      key_start = end - n;
    } else if (cache_k != nullptr) {
      // A chunk: the window's earlier keys from the ring, in order, then the
      // chunk's own; the ring keeps the last `slots` of them afterwards.
      key_start = std::max<int64_t>(0, start - arch.sliding_window + 1);
      if (key_start < start) {
        keys = torch::cat({ReadRing(*cache_k, 2, key_start, start), k}, 2);
        values = torch::cat({ReadRing(*cache_v, 2, key_start, start), v}, 2);
      }
      WriteRing(*cache_k, 2, start, k);
      WriteRing(*cache_v, 2, start, v);
    }
    if (keys.scalar_type() != q.scalar_type()) {  // a reduced-precision cache
      keys = FromCacheForm(keys, hd);
      values = FromCacheForm(values, hd);
    }
    const bool plain = torch::GradMode::is_enabled();  // training: the form autograd differentiates
    // Queries start..end-1 over keys from key_start; [B, H or (KVH, G), T', hd].
    auto attend = [&](int64_t q_first, int64_t q_end, int64_t k_first) {
      const torch::Tensor qs = q.narrow(2, q_first - start, q_end - q_first);
      const torch::Tensor ks = keys.narrow(2, k_first - key_start, q_end - k_first);
      const torch::Tensor vs = values.narrow(2, k_first - key_start, q_end - k_first);
      if (plain) {
        auto probs = Probabilities(qs, ks, q_first, k_first);  // [B, KVH, G, T', S]
        return torch::matmul(probs, vs.unsqueeze(2));          // [B, KVH, G, T', hd]
      }
      // Inference: tiled, online softmax, only the blocks causality and the window allow.
      return BlockedAttention(qs, ks, vs, q_first, k_first, Window());  // [B, H, T', hd]
    };
    torch::Tensor out;
    const int64_t chunk = Chunk();
    if (chunk > 0 && end > chunk) {
      // Llama 4's chunked_attention: each query sees the keys of its own
      // chunk of `chunk` positions (modeling_llama4's chunked causal mask),
      // so the queries are taken a chunk at a time over that chunk's keys.
      TORCH_CHECK(start / chunk * chunk >= key_start, "chunked attention at position ", start,
                  " needs the keys from its chunk's start ", start / chunk * chunk,
                  " (keys held from ", key_start, ")");
      std::vector<torch::Tensor> parts;
      for (int64_t first = start; first < end;) {
        const int64_t chunk_start = first / chunk * chunk;
        const int64_t last = std::min(end, chunk_start + chunk);
        parts.push_back(attend(first, last, chunk_start));
        first = last;
      }
      out = torch::cat(parts, plain ? 3 : 2);
    } else {
      out = attend(start, end, key_start);
    }
    out = out.view({b, h, t, hd}).transpose(1, 2).reshape({b, t, h * hd});
    return Project(out, o_proj->weight);
  }

  // Attention weights of queries q [B, H, T, hd] (positions start..start+T-1)
  // over keys [B, KVH, S, hd] (positions key_start..key_start+S-1), with the
  // causal and window masks: [B, KVH, H/KVH, T, S].
  torch::Tensor Probabilities(const torch::Tensor& q, const torch::Tensor& keys, int64_t start,
                              int64_t key_start) {
    return ReferenceProbabilities(q, keys, start, key_start, Window());
  }

  // Tokens a query may look back (itself included); 0: no limit.
  int64_t Window() const { return type == Attention::kSlidingWindow ? arch.sliding_window : 0; }

  // Llama 4's chunk (Arch::attention_chunk) where this layer is chunked (its
  // rotating layers, ReadLlama4), else 0.
  int64_t Chunk() const { return rope ? arch.attention_chunk : 0; }

  // Slim attention (Slim Attention Sec. 2): the cache holds each token's raw
  // keys K = x W_K (before K-norm and RoPE), [B, capacity, d]; values are
  // never stored but follow from V = K W_KV (Eq. 4). Scores need the
  // normalised, rotated keys, recomputed from the raw ones over the keys
  // read. Prompt chunks (T > 1) take Option 1 (V = K W_KV, then the
  // weighted sum); a single decode query takes the optimised Option 2 of
  // Eq. 5: (softmax(q K^T) K) W_KV,i per head, 2nd(h+1) OPs instead of
  // 2nd^2 (Tab. 2). Without a cache (training), Option 1 over the chunk.
  torch::Tensor SlimForward(const torch::Tensor& x, int64_t start, const torch::Tensor& cos,
                            const torch::Tensor& sin, torch::Tensor* cache_k,
                            ForwardObserver* observer, int layer) {
    const int64_t b = x.size(0), t = x.size(1);
    const int64_t h = arch.num_heads, hd = arch.head_dim, width = arch.kv_width();
    auto q = Project(x, q_proj->weight).view({b, t, h, hd});
    auto raw = Project(x, k_proj->weight);  // [B, T, d]
    if (observer != nullptr) {
      observer->OnKeysValues(layer, raw.view({b, t, h, hd}),
                             Project(raw, kv_proj->weight).view({b, t, h, hd}));
    }
    if (arch.qk_norm) q = q_norm(q);
    q = ApplyRope(q, cos.view({1, t, 1, hd}), sin.view({1, t, 1, hd})).transpose(1, 2);
    int64_t key_start = 0;
    torch::Tensor keys_raw = raw, key_cos = cos, key_sin = sin;
    const int64_t end = start + t;
    if (cache_k != nullptr && type != Attention::kSlidingWindow) {
      cache_k->narrow(1, start, t).copy_(raw);
      keys_raw = cache_k->narrow(1, 0, end);
      key_cos = rope_cos->narrow(0, 0, end);
      key_sin = rope_sin->narrow(0, 0, end);
    } else if (cache_k != nullptr) {
      // The ring of raw keys (see WriteRing), read back in position order
      // (RoPE needs each key's position; a slim decode step reads at most
      // `window` keys, so the copy is small).
      key_start = std::max<int64_t>(0, start - arch.sliding_window + 1);
      keys_raw =
          key_start < start ? torch::cat({ReadRing(*cache_k, 1, key_start, start), raw}, 1) : raw;
      WriteRing(*cache_k, 1, start, raw);
      key_cos = rope_cos->narrow(0, key_start, end - key_start);
      key_sin = rope_sin->narrow(0, key_start, end - key_start);
    }
    const int64_t n = keys_raw.size(1);
    torch::Tensor probs;
    if (t == 1 && cache_k != nullptr && !torch::GradMode::is_enabled() &&
        (x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble)) {
      // One fused pass over the raw keys (no rotated copy of n x d); decode
      // only: the loop has no gradient.
      probs = torch::softmax(
          SlimDecodeScores(keys_raw, q, key_cos, key_sin,
                           arch.qk_norm ? k_norm->weight : torch::Tensor(), arch.norm_eps),
          -1);
    } else {
      auto keys = RotatedKeys(keys_raw.view({b, n, h, hd}), key_cos, key_sin);  // [B, H, S, hd]
      probs = Probabilities(q, keys, start, key_start).view({b, h, t, n});
    }
    torch::Tensor out;
    if (t == 1 && cache_k != nullptr) {
      // Option 2: u_i = softmax_i K (one d-vector per head), then
      // head_i = u_i W_KV,i with W_KV,i the rows i*hd..(i+1)*hd of kv_proj.
      auto u = torch::matmul(probs.view({b, h, n}), keys_raw);        // [B, H, d]
      auto w = kv_proj->weight.view({h, hd, width}).transpose(1, 2);  // [H, d, hd]
      out = torch::bmm(u.transpose(0, 1), w).transpose(0, 1).reshape({b, t, h * hd});
    } else {
      auto values = Project(keys_raw, kv_proj->weight).view({b, n, h, hd}).transpose(1, 2);
      out = torch::matmul(probs, values).transpose(1, 2).reshape({b, t, h * hd});
    }
    return Project(out, o_proj->weight);
  }

  // Whether q and k [B, T, heads, hd] take NormRopeHeadsFirst: a RoPE
  // layer with QK-norm (Qwen3's) and nothing between the two (no Llama 4
  // L2 norm, no temperature), at inference, in float.
  bool FusedNormRope(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& cos,
                     const torch::Tensor& sin) const {
    if (!arch.qk_norm || !rope || arch.qk_l2_norm) return false;
    return NormRopeHeadsFirstApplies(q, q_norm->weight, cos, sin) &&
           NormRopeHeadsFirstApplies(k, k_norm->weight, cos, sin);
  }

  // Raw keys [B, T, KVH, hd] -> K-norm (when the model has one), RoPE at
  // the positions of cos/sin [T, hd], heads first: [B, KVH, T, hd].
  torch::Tensor RotatedKeys(torch::Tensor k, const torch::Tensor& cos, const torch::Tensor& sin) {
    if (arch.qk_norm) k = k_norm(k);
    return Rotated(UnitRms(k), cos, sin).transpose(1, 2);
  }

  // Llama 4's QK-norm (Llama4TextL2Norm) in a RoPE layer: each head divided
  // by its RMS, no weight, in float as Hugging Face computes it. Applied
  // before the rotation here, after it there: a rotation keeps the RMS.
  torch::Tensor UnitRms(const torch::Tensor& x) const {
    if (!arch.qk_l2_norm || !rope) return x;
    const torch::Tensor f = x.scalar_type() == torch::kDouble ? x : x.to(torch::kFloat);
    return (f * torch::rsqrt(f.pow(2).mean(-1, /*keepdim=*/true) + arch.norm_eps))
        .to(x.scalar_type());
  }

  // Llama 4's attention temperature tuning: a NoPE layer's queries q
  // [B, H, T, hd] at positions start..start+T-1 times QueryTemperature,
  // multiplied in float and rounded back, as Llama4TextAttention does.
  torch::Tensor Tempered(const torch::Tensor& q, int64_t start) const {
    if (rope || arch.temperature_floor_scale <= 0) return q;
    const int64_t t = q.size(2);
    std::vector<double> factors(t);
    for (int64_t i = 0; i < t; ++i) factors[i] = QueryTemperature(arch, start + i);
    const auto wide = q.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    const torch::Tensor scales = torch::tensor(factors, torch::kDouble).to(wide).view({1, 1, t, 1});
    return (q.to(wide) * scales).to(q.scalar_type());
  }

  // x [B, T, heads, hd] rotated at the positions of cos/sin [T, hd]; a NoPE
  // layer (SmolLM3) leaves it as it is.
  torch::Tensor Rotated(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin) const {
    if (!rope) return x;
    const int64_t t = x.size(1), hd = arch.head_dim;
    return ApplyRope(x, cos.view({1, t, 1, hd}), sin.view({1, t, 1, hd}));
  }

  Arch arch;
  Attention type;
  bool rope = true;  // false: a NoPE layer (Arch::no_rope)
  // The decoder's RoPE tables from position 0, long enough for any cache it
  // made (slim layers rotate every cached key at each step).
  const torch::Tensor* rope_cos = nullptr;
  const torch::Tensor* rope_sin = nullptr;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  torch::nn::Linear kv_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};
};

TORCH_MODULE(AttentionBlock);

struct MlpImpl : torch::nn::Module {
  explicit MlpImpl(const Arch& a) : geglu(a.gemma) {
    gate_proj = register_module("gate_proj", MakeLinear(a.d_model, a.d_ffn));
    up_proj = register_module("up_proj", MakeLinear(a.d_model, a.d_ffn));
    down_proj = register_module("down_proj", MakeLinear(a.d_ffn, a.d_model));
  }
  torch::Tensor forward(const torch::Tensor& x, ForwardObserver* observer = nullptr,
                        int layer = 0) {  // SwiGLU (Gemma: GeGLU)
    auto gate_up = ProjectMany(x, {gate_proj->weight, up_proj->weight});
    auto hidden = geglu ? GeGlu(std::move(gate_up[0]), std::move(gate_up[1]))
                        : SwiGlu(std::move(gate_up[0]), std::move(gate_up[1]));
    if (observer != nullptr) observer->OnFfnHidden(layer, hidden);
    return Project(hidden, down_proj->weight);
  }
  bool geglu = false;
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};

TORCH_MODULE(Mlp);

struct LayerImpl : torch::nn::Module {
  // Llama: input_layernorm before attention, post_attention_layernorm
  // before the MLP. Gemma 3 (Gemma3DecoderLayer): input_layernorm and
  // post_attention_layernorm around attention (the latter on its output),
  // pre_feedforward_layernorm and post_feedforward_layernorm around the MLP.
  LayerImpl(const Arch& a, Attention type, bool rope) {
    auto norm = [&](const char* name) {
      return register_module(name, RmsNorm(a.d_model, a.norm_eps));
    };
    if (type != Attention::kSkip) {
      input_layernorm = norm("input_layernorm");
      self_attn = register_module("self_attn", AttentionBlock(a, type, rope));
      if (a.gemma) attn_out_norm = norm("post_attention_layernorm");
    }
    ffn_norm = norm(a.gemma ? "pre_feedforward_layernorm" : "post_attention_layernorm");
    mlp = register_module("mlp", Mlp(a));
    if (a.gemma) ffn_out_norm = norm("post_feedforward_layernorm");
  }
  torch::Tensor forward(torch::Tensor x, int64_t start, const torch::Tensor& cos,
                        const torch::Tensor& sin, torch::Tensor* ck, torch::Tensor* cv,
                        ForwardObserver* observer = nullptr, int layer = 0,
                        const LayerKv* provided = nullptr) {
    const torch::Tensor input = x;
    if (self_attn) {
      auto normed = input_layernorm(x);
      if (observer != nullptr) observer->OnBlockNorm(layer, normed);
      auto out = self_attn->forward(normed, start, cos, sin, ck, cv, provided, observer, layer);
      x = x + (attn_out_norm ? attn_out_norm(out) : out);
    }
    auto normed = ffn_norm(x);
    if (observer != nullptr) observer->OnBlockNorm(layer, normed);
    auto out = mlp->forward(normed, observer, layer);
    x = x + (ffn_out_norm ? ffn_out_norm(out) : out);
    if (observer != nullptr) observer->OnLayer(layer, input, x);
    return x;
  }
  // ffn_norm is post_attention_layernorm (Llama) or pre_feedforward_layernorm
  // (Gemma); the output norms are Gemma's only.
  RmsNorm input_layernorm{nullptr}, ffn_norm{nullptr};
  RmsNorm attn_out_norm{nullptr}, ffn_out_norm{nullptr};
  AttentionBlock self_attn{nullptr};
  Mlp mlp{nullptr};
};

TORCH_MODULE(Layer);

struct BackboneImpl : torch::nn::Module {
  // Each part is converted to `dtype` as soon as it is built, so a bf16
  // model never holds all its weights in f32 at once (a 1.8B backbone would
  // need 7.2 GB for a moment).
  BackboneImpl(const Arch& a, torch::Dtype dtype) {
    embed_tokens = register_module("embed_tokens", MakeEmbedding(a.vocab_size, a.d_model));
    embed_tokens->to(dtype);
    layers = register_module("layers", torch::nn::ModuleList());
    for (int i = 0; i < a.num_layers; ++i) {
      Layer l(a, a.attention[i], a.rotates(i));
      l->to(dtype);
      layers->push_back(l);
      typed_layers.push_back(l);
    }
    norm = register_module("norm", RmsNorm(a.d_model, a.norm_eps));
    norm->to(dtype);
  }
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  std::vector<Layer> typed_layers;
  RmsNorm norm{nullptr};
};

TORCH_MODULE(Backbone);

class DecoderImpl : public torch::nn::Module {
 public:
  DecoderImpl(const Arch& a, torch::Dtype dtype) : arch_(a), dtype_(dtype) {
    model_ = register_module("model", Backbone(a, dtype));
    if (!a.tie_embeddings) {
      lm_head_ = register_module("lm_head", MakeLinear(a.d_model, a.vocab_size));
      lm_head_->to(dtype);
    }
    inv_freq_ = RopeInverseFrequencies(a);
    if (a.local_rope_theta > 0) {  // Gemma 3: window layers rotate with their own base, unscaled
      Arch local = a;
      local.rope_theta = a.local_rope_theta;
      local.rope_scaling = RopeScaling();
      local_inv_freq_ = RopeInverseFrequencies(local);
    }
    for (auto& layer : model_->typed_layers) {
      if (!layer->self_attn) continue;
      layer->self_attn->rope_cos = &cos_table_;
      layer->self_attn->rope_sin = &sin_table_;
    }
  }

  // Grows the RoPE tables to cover positions 0..end-1 (doubling, so a
  // decode loop recomputes them O(log n) times). Values do not depend on the
  // table's length: each entry is cos/sin(pos * inv_freq) in double, cast.
  void ReserveRope(int64_t end) {
    if (cos_table_.defined() && cos_table_.size(0) >= end) return;
    const int64_t n = std::max<int64_t>(end, cos_table_.defined() ? 2 * cos_table_.size(0) : 64);
    auto pos = torch::arange(0, n, torch::kDouble);
    auto table = [&](const torch::Tensor& inv, torch::Tensor& cos, torch::Tensor& sin) {
      auto freqs = torch::outer(pos, inv);
      auto emb = torch::cat({freqs, freqs}, -1);
      cos = emb.cos().to(dtype_);
      sin = emb.sin().to(dtype_);
    };
    table(inv_freq_, cos_table_, sin_table_);
    if (local_inv_freq_.defined()) table(local_inv_freq_, local_cos_, local_sin_);
  }

  // RoPE tables for positions start..start+t-1, [t, head_dim] each: a
  // window layer's own when the model has local ones (local_rope_theta).
  std::pair<torch::Tensor, torch::Tensor> Rope(int64_t start, int64_t t,
                                               Attention kind = Attention::kFull) {
    ReserveRope(start + t);
    if (kind == Attention::kSlidingWindow && local_inv_freq_.defined()) {
      return {local_cos_.narrow(0, start, t), local_sin_.narrow(0, start, t)};
    }
    return {cos_table_.narrow(0, start, t), sin_table_.narrow(0, start, t)};
  }

  // Gemma 3 scales the embedding by sqrt(d_model) (Gemma3TextScaledWordEmbedding).
  double EmbedScale() const { return arch_.gemma ? std::sqrt(double(arch_.d_model)) : 1.0; }

  torch::Tensor Embed(const torch::Tensor& tokens) {
    const torch::Tensor& table = model_->embed_tokens->weight;
    torch::Tensor x = QuantTypeOf(table) ? DequantizedRows(table, tokens).to(dtype_)
                                         : model_->embed_tokens(tokens).to(dtype_);
    return arch_.gemma ? x * EmbedScale() : x;
  }

  // Layers [first, last) over hidden states x [B, T, d] at positions
  // start..start+T-1, writing their keys and values into `cache` (if any).
  torch::Tensor RunLayers(torch::Tensor x, int64_t start, int first, int last, KvCache* cache,
                          ForwardObserver* observer = nullptr,
                          const std::vector<LayerKv>* provided = nullptr) {
    const auto [cos, sin] = Rope(start, x.size(1));
    const auto [local_cos, local_sin] = Rope(start, x.size(1), Attention::kSlidingWindow);
    for (int i = first; i < last; ++i) {
      torch::Tensor* ck = cache ? &cache->keys(i) : nullptr;
      torch::Tensor* cv = cache ? &cache->values(i) : nullptr;
      const bool local = arch_.attention[i] == Attention::kSlidingWindow;
      x = model_->typed_layers[i]->forward(x, start, local ? local_cos : cos,
                                           local ? local_sin : sin, ck, cv, observer, i,
                                           provided ? &(*provided)[i] : nullptr);
    }
    return x;
  }

  // Final norm and output head.
  torch::Tensor Head(const torch::Tensor& x) {
    const auto& head = arch_.tie_embeddings ? model_->embed_tokens->weight : lm_head_->weight;
    return Project(model_->norm(x), head);
  }

  torch::Tensor Run(const torch::Tensor& tokens, int64_t start, KvCache* cache, bool last_only,
                    ForwardObserver* observer = nullptr,
                    const std::vector<LayerKv>* provided = nullptr) {
    const int64_t t = tokens.size(1);
    auto x = RunLayers(Embed(tokens), start, 0, arch_.num_layers, cache, observer, provided);
    if (last_only) x = x.narrow(1, t - 1, 1);
    return Head(x);
  }

  // Whether DecodeStep can take a token into `cache`: f32 activations,
  // inference, batch 1, the standard cache layout with storage for every
  // attention layer.
  bool CanDecodeInPlace(const KvCache& cache) const;
  // The same for `tokens`, which must also be one token id, [1, 1] int64.
  bool CanDecodeInPlace(const torch::Tensor& tokens, const KvCache& cache) const;

  // One token through the model (ForwardCached's decode step) in raw loops
  // over buffers that live as long as the calling thread, so a step makes
  // no allocation but its returned logits (issue 22) and dispatches no ATen
  // operator: per layer RMSNorm, q/k/v in one parallel GEMV, QK-norm and
  // RoPE per head, the cache slot written (a window layer's ring: slot
  // position % slots), DecodeAttention, o, residual, RMSNorm, gate/up in one
  // GEMV, SwiGLU, down, residual. The same kernels and formulas as the ATen
  // path (tests hold them to it). Does not advance the cache.
  torch::Tensor DecodeStep(int64_t token, KvCache& cache);

  Arch arch_;
  bool in_place_decode_ = true;
  torch::Dtype kv_dtype_ = torch::kFloat;  // the cache's storage (Decoder::SetKvDtype)
  bool kv_dtype_set_ = false;              // false: the compute dtype
  torch::Dtype dtype_;
  Backbone model_{nullptr};
  torch::nn::Linear lm_head_{nullptr};
  torch::Tensor inv_freq_, local_inv_freq_;  // local: undefined unless local_rope_theta
  torch::Tensor cos_table_, sin_table_, local_cos_, local_sin_;
};

}  // namespace decoder_internal
}  // namespace hilnas

#endif  // HILNAS_MODEL_INTERNAL_DECODER_LAYERS_H_
