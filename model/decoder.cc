#include "model/decoder.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "model/attention.h"
#include "model/gemv.h"
#include "model/slim.h"

namespace hilnas {
namespace {

namespace F = torch::nn::functional;

// RMSNorm in one pass per row for inference (the ATen form below is six
// ops, each a dispatch and a temporary: a fifth of a small model's decode
// step went to per-op cost). Same formula, float accumulation.
void RmsNormRow(const float* x, const float* w, int64_t d, double eps, float* out) {
  float sum = 0;
  for (int64_t i = 0; i < d; ++i) sum += x[i] * x[i];
  const float scale = 1.0f / std::sqrt(sum / static_cast<float>(d) + static_cast<float>(eps));
  for (int64_t i = 0; i < d; ++i) out[i] = x[i] * scale * w[i];
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

torch::nn::Linear MakeLinear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

// x @ w^T for a bias-free projection. One token (decode) is a matrix-vector
// product: BLAS gemv streams the weights 3-4x faster than gemm with M = 1,
// which is what linear() would call (measured: 202048x1024 fp32 head, 2
// threads, OpenBLAS: 18 ms vs 66 ms). Decode is bound by weight bytes.
//
// Weights stored in half precision (Decoder::StoreWeightsAs) are computed
// in x's dtype: a one-token product reads them as they are (WeightGemv,
// half the bytes), a prompt widens the matrix once and multiplies in f32.
torch::Tensor Project(const torch::Tensor& x, const torch::Tensor& w) {
  if (w.scalar_type() != x.scalar_type()) {
    if (x.numel() == w.size(1) && x.scalar_type() == torch::kFloat) {
      std::vector<int64_t> shape = x.sizes().vec();
      shape.back() = w.size(0);
      return WeightGemv(w, x).view(shape);
    }
    return torch::matmul(x, w.to(x.scalar_type()).t());
  }
  if (x.numel() == w.size(1)) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    if (x.scalar_type() == torch::kFloat) return WeightGemv(w, x).view(shape);
    return torch::mv(w, x.reshape({-1})).view(shape);
  }
  return torch::matmul(x, w.t());
}

// x through several matrices of the same width, as Project would: one
// float token (decode) takes all the products in one parallel region.
std::vector<torch::Tensor> ProjectMany(const torch::Tensor& x,
                                       const std::vector<torch::Tensor>& ws) {
  std::vector<torch::Tensor> out;
  if (x.scalar_type() == torch::kFloat && x.numel() == ws[0].size(1)) {
    out = WeightGemvs(ws, x);
    for (size_t m = 0; m < ws.size(); ++m) {
      std::vector<int64_t> shape = x.sizes().vec();
      shape.back() = ws[m].size(0);
      out[m] = out[m].view(shape);
    }
    return out;
  }
  for (const torch::Tensor& w : ws) out.push_back(Project(x, w));
  return out;
}

// out = silu(gate) * up, elementwise over n floats (out may alias gate).
void SwiGluRow(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

// silu(gate) * up. One token's worth in one loop (two ATen ops and a
// temporary cost more than the arithmetic); larger inputs take ATen's
// vectorised kernels.
torch::Tensor SwiGlu(const torch::Tensor& gate, const torch::Tensor& up) {
  if (gate.scalar_type() != torch::kFloat || gate.numel() > 16384 || !gate.is_contiguous() ||
      !up.is_contiguous() || torch::GradMode::is_enabled()) {
    return F::silu(gate) * up;
  }
  torch::Tensor out = torch::empty_like(gate);
  SwiGluRow(gate.data_ptr<float>(), up.data_ptr<float>(), gate.numel(), out.data_ptr<float>());
  return out;
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

// Rotary embedding in the Hugging Face "rotate half" layout: dimension i is
// paired with i + head_dim/2. One head's row; out must not alias x.
void RopeRow(const float* x, const float* c, const float* sn, int64_t hd, float* out) {
  const int64_t half = hd / 2;
  for (int64_t i = 0; i < half; ++i) {
    out[i] = x[i] * c[i] + (-x[i + half]) * sn[i];
    out[i + half] = x[i + half] * c[i + half] + x[i] * sn[i + half];
  }
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

struct AttentionBlockImpl : torch::nn::Module {
  AttentionBlockImpl(const Arch& a, Attention type) : arch(a), type(type) {
    q_proj = register_module("q_proj", MakeLinear(a.d_model, a.q_width()));
    k_proj = register_module("k_proj", MakeLinear(a.d_model, a.kv_width()));
    if (a.kv_cache == KvLayout::kSlim) {
      // Slim Attention Eq. 4: V = K W_KV, stored in place of W_V.
      kv_proj = register_module("kv_proj", MakeLinear(a.kv_width(), a.kv_width()));
    } else {
      v_proj = register_module("v_proj", MakeLinear(a.d_model, a.kv_width()));
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
      q = Project(x, q_proj->weight);
      k = provided->keys;
      v = provided->values;
    } else {
      auto qkv = ProjectMany(x, {q_proj->weight, k_proj->weight, v_proj->weight});
      q = qkv[0];
      k = qkv[1].view({b, t, kvh, hd});
      v = qkv[2].view({b, t, kvh, hd});
    }
    q = q.view({b, t, h, hd});
    if (observer != nullptr) observer->OnKeysValues(layer, k, v);
    if (arch.qk_norm) q = q_norm(q);
    q = ApplyRope(q, cos.view({1, t, 1, hd}), sin.view({1, t, 1, hd})).transpose(1, 2);
    k = RotatedKeys(k, cos, sin);  // [B, KVH, T, hd]
    v = v.transpose(1, 2);

    int64_t key_start = 0;  // absolute position of the first key read
    torch::Tensor keys = k, values = v;
    const int64_t end = start + t;
    if (cache_k != nullptr && type != Attention::kSlidingWindow) {
      cache_k->narrow(2, start, t).copy_(k);
      cache_v->narrow(2, start, t).copy_(v);
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
    torch::Tensor out;
    if (torch::GradMode::is_enabled()) {  // training: the plain form autograd differentiates
      auto probs = Probabilities(q, keys, start, key_start);  // [B, KVH, G, T, S]
      out = torch::matmul(probs, values.unsqueeze(2));        // [B, KVH, G, T, hd]
    } else {  // inference: tiled, online softmax, only the blocks causality and the window allow
      out = BlockedAttention(q, keys, values, start, key_start, Window());  // [B, H, T, hd]
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

  // Raw keys [B, T, KVH, hd] -> K-norm (when the model has one), RoPE at
  // the positions of cos/sin [T, hd], heads first: [B, KVH, T, hd].
  torch::Tensor RotatedKeys(torch::Tensor k, const torch::Tensor& cos, const torch::Tensor& sin) {
    const int64_t t = k.size(1), hd = arch.head_dim;
    if (arch.qk_norm) k = k_norm(k);
    return ApplyRope(k, cos.view({1, t, 1, hd}), sin.view({1, t, 1, hd})).transpose(1, 2);
  }

  Arch arch;
  Attention type;
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
  explicit MlpImpl(const Arch& a) {
    gate_proj = register_module("gate_proj", MakeLinear(a.d_model, a.d_ffn));
    up_proj = register_module("up_proj", MakeLinear(a.d_model, a.d_ffn));
    down_proj = register_module("down_proj", MakeLinear(a.d_ffn, a.d_model));
  }
  torch::Tensor forward(const torch::Tensor& x, ForwardObserver* observer = nullptr,
                        int layer = 0) {  // SwiGLU
    auto gate_up = ProjectMany(x, {gate_proj->weight, up_proj->weight});
    auto hidden = SwiGlu(gate_up[0], gate_up[1]);
    if (observer != nullptr) observer->OnFfnHidden(layer, hidden);
    return Project(hidden, down_proj->weight);
  }
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(Mlp);

struct LayerImpl : torch::nn::Module {
  LayerImpl(const Arch& a, Attention type) {
    if (type != Attention::kSkip) {
      input_layernorm = register_module("input_layernorm", RmsNorm(a.d_model, a.norm_eps));
      self_attn = register_module("self_attn", AttentionBlock(a, type));
    }
    post_attention_layernorm =
        register_module("post_attention_layernorm", RmsNorm(a.d_model, a.norm_eps));
    mlp = register_module("mlp", Mlp(a));
  }
  torch::Tensor forward(torch::Tensor x, int64_t start, const torch::Tensor& cos,
                        const torch::Tensor& sin, torch::Tensor* ck, torch::Tensor* cv,
                        ForwardObserver* observer = nullptr, int layer = 0,
                        const LayerKv* provided = nullptr) {
    if (observer == nullptr) {
      if (self_attn) {
        x = x + self_attn->forward(input_layernorm(x), start, cos, sin, ck, cv, provided);
      }
      return x + mlp(post_attention_layernorm(x));
    }
    const torch::Tensor input = x;
    if (self_attn) {
      auto normed = input_layernorm(x);
      observer->OnBlockNorm(layer, normed);
      x = x + self_attn->forward(normed, start, cos, sin, ck, cv, provided, observer, layer);
    }
    auto normed = post_attention_layernorm(x);
    observer->OnBlockNorm(layer, normed);
    x = x + mlp->forward(normed, observer, layer);
    observer->OnLayer(layer, input, x);
    return x;
  }
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  AttentionBlock self_attn{nullptr};
  Mlp mlp{nullptr};
};
TORCH_MODULE(Layer);

struct BackboneImpl : torch::nn::Module {
  // Each part is converted to `dtype` as soon as it is built, so a bf16
  // model never holds all its weights in f32 at once (a 1.8B backbone would
  // need 7.2 GB for a moment).
  BackboneImpl(const Arch& a, torch::Dtype dtype) {
    embed_tokens = register_module("embed_tokens", torch::nn::Embedding(a.vocab_size, a.d_model));
    embed_tokens->to(dtype);
    layers = register_module("layers", torch::nn::ModuleList());
    for (Attention at : a.attention) {
      Layer l(a, at);
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

}  // namespace

// RoPE inverse frequencies theta^(-2i/hd), i < hd/2, in double, scaled as
// the checkpoint says (proto/arch.proto's RopeScalingSpec).
torch::Tensor RopeInverseFrequencies(const Arch& a) {
  torch::Tensor inv = torch::pow(a.rope_theta, -torch::arange(0, a.head_dim, 2, torch::kDouble) /
                                                   static_cast<double>(a.head_dim));
  const RopeScaling& r = a.rope_scaling;
  if (r.kind == RopeScaling::Kind::kLinear) return inv / r.factor;
  if (r.kind != RopeScaling::Kind::kLlama3) return inv;
  // Llama 3.1's scaling: wavelengths longer than original/low_freq_factor
  // are stretched by factor, shorter than original/high_freq_factor kept,
  // and those between interpolated by how many fit in the original context.
  const double original = r.original_max_position_embeddings;
  const torch::Tensor wavelen = 2 * M_PI / inv;
  const torch::Tensor smooth =
      (original / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
  const torch::Tensor blended = (1 - smooth) * inv / r.factor + smooth * inv;
  return torch::where(wavelen > original / r.low_freq_factor, inv / r.factor,
                      torch::where(wavelen < original / r.high_freq_factor, inv, blended));
}

// What DecoderImpl::DecodeStep writes between its kernels, one token's
// worth, kept per thread (pipelined decoding steps several caches of one
// decoder from threads at once).
struct DecodeBuffers {
  std::vector<float> x, normed, out, q, q_rot, k, v, head, attn, gate, up;
  void Reserve(const Arch& a) {  // a no-op once grown
    for (auto* b : {&x, &normed, &out}) b->resize(std::max<size_t>(b->size(), a.d_model));
    for (auto* b : {&q, &q_rot, &attn}) b->resize(std::max<size_t>(b->size(), a.q_width()));
    for (auto* b : {&k, &v}) b->resize(std::max<size_t>(b->size(), a.kv_width()));
    for (auto* b : {&gate, &up}) b->resize(std::max<size_t>(b->size(), a.d_ffn));
    head.resize(std::max<size_t>(head.size(), a.head_dim));
  }
};

// Row `token` of an embedding table stored in f32, bf16 or f16, as f32.
void EmbeddingRow(const torch::Tensor& table, int64_t token, float* out) {
  const int64_t d = table.size(1);
  switch (table.scalar_type()) {
    case torch::kFloat: {
      const float* row = table.data_ptr<float>() + token * d;
      std::copy(row, row + d, out);
      return;
    }
    case torch::kHalf: {
      const at::Half* row = table.data_ptr<at::Half>() + token * d;
      for (int64_t i = 0; i < d; ++i) out[i] = static_cast<float>(row[i]);
      return;
    }
    case torch::kBFloat16: {
      const at::BFloat16* row = table.data_ptr<at::BFloat16>() + token * d;
      for (int64_t i = 0; i < d; ++i) out[i] = static_cast<float>(row[i]);
      return;
    }
    default:
      TORCH_CHECK(false, "embedding table of type ", table.scalar_type());
  }
}

class DecoderImpl : public torch::nn::Module {
 public:
  DecoderImpl(const Arch& a, torch::Dtype dtype) : arch_(a), dtype_(dtype) {
    model_ = register_module("model", Backbone(a, dtype));
    if (!a.tie_embeddings) {
      lm_head_ = register_module("lm_head", MakeLinear(a.d_model, a.vocab_size));
      lm_head_->to(dtype);
    }
    inv_freq_ = RopeInverseFrequencies(a);
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
    auto freqs = torch::outer(pos, inv_freq_);
    auto emb = torch::cat({freqs, freqs}, -1);
    cos_table_ = emb.cos().to(dtype_);
    sin_table_ = emb.sin().to(dtype_);
  }

  // RoPE tables for positions start..start+t-1, [t, head_dim] each.
  std::pair<torch::Tensor, torch::Tensor> Rope(int64_t start, int64_t t) {
    ReserveRope(start + t);
    return {cos_table_.narrow(0, start, t), sin_table_.narrow(0, start, t)};
  }

  torch::Tensor Embed(const torch::Tensor& tokens) {
    return model_->embed_tokens(tokens).to(dtype_);  // a no-op unless stored in half precision
  }

  // Layers [first, last) over hidden states x [B, T, d] at positions
  // start..start+T-1, writing their keys and values into `cache` (if any).
  torch::Tensor RunLayers(torch::Tensor x, int64_t start, int first, int last, KvCache* cache,
                          ForwardObserver* observer = nullptr,
                          const std::vector<LayerKv>* provided = nullptr) {
    const auto [cos, sin] = Rope(start, x.size(1));
    for (int i = first; i < last; ++i) {
      torch::Tensor* ck = cache ? &cache->keys(i) : nullptr;
      torch::Tensor* cv = cache ? &cache->values(i) : nullptr;
      x = model_->typed_layers[i]->forward(x, start, cos, sin, ck, cv, observer, i,
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

  // Whether DecodeStep can take `tokens` into `cache`: one token, f32
  // activations, inference, batch 1, the standard cache layout with storage
  // for every attention layer.
  bool CanDecodeInPlace(const torch::Tensor& tokens, const KvCache& cache) const {
    if (!in_place_decode_ || dtype_ != torch::kFloat || torch::GradMode::is_enabled() ||
        cache.slim() || tokens.numel() != 1 || tokens.dim() != 2 ||
        tokens.scalar_type() != torch::kLong) {
      return false;
    }
    for (int i = 0; i < arch_.num_layers; ++i) {
      if (arch_.attention[i] == Attention::kSkip) continue;
      const torch::Tensor& k = cache.keys(i);
      const torch::Tensor& v = cache.values(i);
      if (!k.defined() || !v.defined() || k.size(0) != 1 || !k.is_contiguous() ||
          !v.is_contiguous() || k.scalar_type() != torch::kFloat) {
        return false;
      }
    }
    return true;
  }

  // One token through the model (ForwardCached's decode step) in raw loops
  // over buffers that live as long as the calling thread, so a step makes
  // no allocation but its returned logits (issue 22) and dispatches no ATen
  // operator: per layer RMSNorm, q/k/v in one parallel GEMV, QK-norm and
  // RoPE per head, the cache slot written (a window layer's ring: slot
  // position % slots), DecodeAttention, o, residual, RMSNorm, gate/up in one
  // GEMV, SwiGLU, down, residual. The same kernels and formulas as the ATen
  // path (tests hold them to it). Does not advance the cache.
  torch::Tensor DecodeStep(int64_t token, KvCache& cache) {
    const Arch& a = arch_;
    const int64_t d = a.d_model, hd = a.head_dim, h = a.num_heads, kvh = a.num_kv_heads;
    const int64_t pos = cache.length();
    TORCH_CHECK(token >= 0 && token < a.vocab_size, "token ", token, " is outside the vocabulary (",
                a.vocab_size, ")");
    ReserveRope(pos + 1);
    thread_local DecodeBuffers buf;
    buf.Reserve(a);
    float* x = buf.x.data();
    float* normed = buf.normed.data();
    float* out = buf.out.data();
    EmbeddingRow(model_->embed_tokens->weight, token, x);
    const float* cos = cos_table_.data_ptr<float>() + pos * hd;
    const float* sin = sin_table_.data_ptr<float>() + pos * hd;
    auto add_into_x = [&](const float* y) {
      for (int64_t j = 0; j < d; ++j) x[j] += y[j];
    };
    for (int i = 0; i < a.num_layers; ++i) {
      LayerImpl& layer = *model_->typed_layers[i];
      if (layer.self_attn) {
        AttentionBlockImpl& at = *layer.self_attn;
        RmsNormRow(x, layer.input_layernorm->weight.data_ptr<float>(), d,
                   layer.input_layernorm->eps, normed);
        float *q = buf.q.data(), *k = buf.k.data(), *v = buf.v.data();
        const GemvProduct qkv[3] = {
            {&at.q_proj->weight, q}, {&at.k_proj->weight, k}, {&at.v_proj->weight, v}};
        WeightGemvsInto(qkv, 3, normed);
        // QK-norm, then RoPE, per head (the ATen path's order).
        auto rotate = [&](float* row, const RmsNorm& norm, float* dst) {
          if (a.qk_norm) {
            RmsNormRow(row, norm->weight.data_ptr<float>(), hd, norm->eps, buf.head.data());
            row = buf.head.data();
          }
          RopeRow(row, cos, sin, hd, dst);
        };
        float* q_rot = buf.q_rot.data();
        for (int64_t j = 0; j < h; ++j) rotate(q + j * hd, at.q_norm, q_rot + j * hd);
        torch::Tensor& cache_k = cache.keys(i);
        torch::Tensor& cache_v = cache.values(i);
        const int64_t slots = cache_k.size(2), head_stride = cache_k.stride(1);
        float* kp = cache_k.data_ptr<float>();
        float* vp = cache_v.data_ptr<float>();
        const int64_t slot = pos % slots;
        for (int64_t j = 0; j < kvh; ++j) {
          rotate(k + j * hd, at.k_norm, kp + j * head_stride + slot * hd);
          std::copy(v + j * hd, v + (j + 1) * hd, vp + j * head_stride + slot * hd);
        }
        const int64_t n = std::min(pos + 1, slots);  // a ring's slots hold the last n positions
        DecodeAttention(q_rot, h, kvh, hd, kp, vp, head_stride, n, pos + 1 - n, pos,
                        buf.attn.data());
        const GemvProduct o{&at.o_proj->weight, out};
        WeightGemvsInto(&o, 1, buf.attn.data());
        add_into_x(out);
      }
      RmsNormRow(x, layer.post_attention_layernorm->weight.data_ptr<float>(), d,
                 layer.post_attention_layernorm->eps, normed);
      MlpImpl& mlp = *layer.mlp;
      float *gate = buf.gate.data(), *up = buf.up.data();
      const GemvProduct gate_up[2] = {{&mlp.gate_proj->weight, gate}, {&mlp.up_proj->weight, up}};
      WeightGemvsInto(gate_up, 2, normed);
      SwiGluRow(gate, up, a.d_ffn, gate);
      const GemvProduct down{&mlp.down_proj->weight, out};
      WeightGemvsInto(&down, 1, gate);
      add_into_x(out);
    }
    RmsNormRow(x, model_->norm->weight.data_ptr<float>(), d, model_->norm->eps, normed);
    torch::Tensor logits = torch::empty({1, 1, a.vocab_size});
    const GemvProduct head{a.tie_embeddings ? &model_->embed_tokens->weight : &lm_head_->weight,
                           logits.data_ptr<float>()};
    WeightGemvsInto(&head, 1, normed);
    return logits;
  }

  Arch arch_;
  bool in_place_decode_ = true;
  torch::Dtype dtype_;
  Backbone model_{nullptr};
  torch::nn::Linear lm_head_{nullptr};
  torch::Tensor inv_freq_;
  torch::Tensor cos_table_, sin_table_;
};

KvCache::KvCache(const Arch& arch, int64_t batch, int64_t capacity, torch::Dtype dtype, int layers)
    : capacity_(capacity), slim_(arch.kv_cache == KvLayout::kSlim) {
  for (Attention at : arch.attention) {
    keys_.emplace_back();
    values_.emplace_back();
    if (at == Attention::kSkip) continue;
    if (layers >= 0 && static_cast<int>(keys_.size()) > layers) continue;
    // A window layer keeps a ring of `window` slots (see WriteRing).
    const int64_t slots = at == Attention::kSlidingWindow
                              ? std::min<int64_t>(capacity, arch.sliding_window)
                              : capacity;
    if (slim_) {
      keys_.back() = torch::zeros({batch, slots, arch.kv_width()}, dtype);
      continue;
    }
    keys_.back() = torch::zeros({batch, arch.num_kv_heads, slots, arch.head_dim}, dtype);
    values_.back() = torch::zeros({batch, arch.num_kv_heads, slots, arch.head_dim}, dtype);
  }
}

void KvCache::CopyPositions(const KvCache& from, int64_t begin, int64_t end, int first_layer,
                            int last_layer) {
  TORCH_CHECK(slim_ == from.slim_ && keys_.size() == from.keys_.size() && end <= capacity_ &&
                  end <= from.capacity_,
              "KvCache::CopyPositions between caches of different shapes");
  const int dim = slim_ ? 1 : 2;
  for (int i = first_layer; i < last_layer; ++i) {
    if (!keys_[i].defined()) continue;
    CopyRing(keys_[i], from.keys_[i], dim, begin, end);
    if (values_[i].defined()) CopyRing(values_[i], from.values_[i], dim, begin, end);
  }
}

int64_t KvCache::bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i].defined()) n += keys_[i].nbytes();
    if (values_[i].defined()) n += values_[i].nbytes();
  }
  return n;
}

absl::StatusOr<Decoder> Decoder::Create(const Arch& arch, uint64_t seed, torch::Dtype dtype) {
  return CreateImpl(arch, seed, dtype, /*initialize=*/true);
}

absl::StatusOr<Decoder> Decoder::CreateForLoading(const Arch& arch, torch::Dtype dtype) {
  return CreateImpl(arch, 0, dtype, /*initialize=*/false);
}

absl::StatusOr<Decoder> Decoder::CreateImpl(const Arch& arch, uint64_t seed, torch::Dtype dtype,
                                            bool initialize) {
  absl::Status valid = ValidateArch(arch);
  if (!valid.ok()) return valid;
  try {
    auto impl = std::make_shared<DecoderImpl>(arch, dtype);
    torch::NoGradGuard no_grad;
    if (!initialize) {
      impl->to(dtype);
      impl->eval();
      return Decoder(impl);
    }
    // Deterministic initialisation in the fixed ExpectedTensorShapes order:
    // N(0, 0.02) for matrices, output projections scaled by 1/sqrt(2 L)
    // (GPT-2), ones for norm scales.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    Decoder d(impl);
    for (auto& [name, t] : d.NamedTensors()) {
      if (t.dim() == 1) continue;
      const bool residual_out =
          name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
      const double std = 0.02 / (residual_out ? std::sqrt(2.0 * arch.num_layers) : 1.0);
      if (t.scalar_type() == torch::kFloat) {
        t.normal_(0.0, std, gen);
      } else {  // drawn in f32 and rounded, as before parts were built in dtype
        t.copy_(torch::empty(t.sizes(), torch::kFloat).normal_(0.0, std, gen));
      }
    }
    impl->to(dtype);
    impl->eval();
    return d;
  } catch (const c10::Error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("building ", arch.name, ": ", e.what_without_backtrace()));
  }
}

const Arch& Decoder::arch() const { return impl_->arch_; }
torch::Dtype Decoder::dtype() const { return impl_->dtype_; }

absl::Status Decoder::StoreWeightsAs(torch::Dtype storage) {
  if (storage != torch::kBFloat16 && storage != torch::kHalf) {
    return absl::InvalidArgumentError("weights are stored in half precision: bf16 or f16");
  }
  if (impl_->dtype_ != torch::kFloat) {
    return absl::FailedPreconditionError("half-precision weights need an f32 decoder");
  }
  if (impl_->arch_.kv_cache == KvLayout::kSlim) {
    return absl::UnimplementedError(
        "kv_cache slim multiplies by W_KV outside the projections: its weights stay f32");
  }
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : impl_->parameters()) {
    if (p.dim() == 2) p.set_data(p.to(storage).contiguous());
  }
  return absl::OkStatus();
}
torch::nn::Module& Decoder::module() { return *impl_; }

torch::Tensor Decoder::Forward(const torch::Tensor& tokens, ForwardObserver* observer) {
  return impl_->Run(tokens, 0, nullptr, false, observer);
}

namespace {

// Writing positions start..start+t-1 must stay inside the preallocated cache.
void CheckCapacity(const KvCache& cache, int64_t start, int64_t t) {
  TORCH_CHECK(start + t <= cache.capacity(), "KV cache overflow: ", start, " + ", t, " > capacity ",
              cache.capacity());
}

}  // namespace

torch::Tensor Decoder::ForwardCached(const torch::Tensor& tokens, KvCache& cache, bool last_only) {
  const int64_t start = cache.length();
  CheckCapacity(cache, start, tokens.size(1));
  torch::Tensor logits;
  if (impl_->CanDecodeInPlace(tokens, cache)) {
    logits = impl_->DecodeStep(tokens.contiguous().data_ptr<int64_t>()[0], cache);
  } else {
    logits = impl_->Run(tokens, start, &cache, last_only);
  }
  cache.Advance(tokens.size(1));
  return logits;
}

void Decoder::SetInPlaceDecode(bool on) { impl_->in_place_decode_ = on; }

torch::Tensor Decoder::ForwardWithKv(const torch::Tensor& tokens, const std::vector<LayerKv>& kv,
                                     ForwardObserver* observer) {
  TORCH_CHECK(kv.size() == impl_->model_->typed_layers.size(), "ForwardWithKv: ", kv.size(),
              " layers of keys and values for ", impl_->model_->typed_layers.size(), " layers");
  return impl_->Run(tokens, 0, nullptr, false, observer, &kv);
}

void Decoder::FillCache(KvCache& cache, const std::vector<LayerKv>& kv) {
  auto& layers = impl_->model_->typed_layers;
  TORCH_CHECK(kv.size() == layers.size() && cache.length() == 0, "FillCache: ", kv.size(),
              " layers for ", layers.size(), ", cache length ", cache.length());
  TORCH_CHECK(impl_->arch_.kv_cache != KvLayout::kSlim,
              "FillCache: a SLIM cache cannot take predicted values");
  int64_t t = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i]->self_attn) continue;
    t = kv[i].keys.size(1);
    TORCH_CHECK(t <= cache.capacity(), "FillCache: ", t, " tokens > capacity ", cache.capacity());
    const auto [cos, sin] = impl_->Rope(0, t);
    WriteRing(cache.keys(static_cast<int>(i)), 2, 0,
              layers[i]->self_attn->RotatedKeys(kv[i].keys, cos, sin));
    WriteRing(cache.values(static_cast<int>(i)), 2, 0, kv[i].values.transpose(1, 2));
  }
  cache.Advance(t);
}

KvCache Decoder::NewCache(int64_t batch, int64_t capacity, int layers) const {
  impl_->ReserveRope(capacity);
  return KvCache(impl_->arch_, batch, capacity, impl_->dtype_, layers);
}

torch::Tensor Decoder::Embed(const torch::Tensor& tokens) { return impl_->Embed(tokens); }

torch::Tensor Decoder::RunLayers(const torch::Tensor& hidden, KvCache& cache, int64_t start,
                                 int first, int last) {
  TORCH_CHECK(0 <= first && first <= last && last <= impl_->arch_.num_layers, "RunLayers: layers [",
              first, ", ", last, ") of ", impl_->arch_.num_layers);
  CheckCapacity(cache, start, hidden.size(1));
  return impl_->RunLayers(hidden, start, first, last, &cache);
}

torch::Tensor Decoder::Head(const torch::Tensor& hidden) { return impl_->Head(hidden); }

std::vector<std::pair<std::string, torch::Tensor>> Decoder::NamedTensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : impl_->named_parameters(/*recurse=*/true)) {
    out.emplace_back(item.key(), item.value());
  }
  return out;
}

std::vector<torch::Tensor> Decoder::Parameters() const { return impl_->parameters(); }

std::vector<std::pair<std::string, std::vector<int64_t>>> ExpectedTensorShapes(const Arch& a) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  out.push_back({"model.embed_tokens.weight", {a.vocab_size, a.d_model}});
  for (int i = 0; i < a.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    if (a.attention[i] != Attention::kSkip) {
      out.push_back({p + "input_layernorm.weight", {a.d_model}});
      out.push_back({p + "self_attn.q_proj.weight", {a.q_width(), a.d_model}});
      out.push_back({p + "self_attn.k_proj.weight", {a.kv_width(), a.d_model}});
      if (a.kv_cache == KvLayout::kSlim) {
        out.push_back({p + "self_attn.kv_proj.weight", {a.kv_width(), a.kv_width()}});
      } else {
        out.push_back({p + "self_attn.v_proj.weight", {a.kv_width(), a.d_model}});
      }
      out.push_back({p + "self_attn.o_proj.weight", {a.d_model, a.q_width()}});
      if (a.qk_norm) {
        out.push_back({p + "self_attn.q_norm.weight", {a.head_dim}});
        out.push_back({p + "self_attn.k_norm.weight", {a.head_dim}});
      }
    }
    out.push_back({p + "post_attention_layernorm.weight", {a.d_model}});
    out.push_back({p + "mlp.gate_proj.weight", {a.d_ffn, a.d_model}});
    out.push_back({p + "mlp.up_proj.weight", {a.d_ffn, a.d_model}});
    out.push_back({p + "mlp.down_proj.weight", {a.d_model, a.d_ffn}});
  }
  out.push_back({"model.norm.weight", {a.d_model}});
  if (!a.tie_embeddings) out.push_back({"lm_head.weight", {a.vocab_size, a.d_model}});
  return out;
}

}  // namespace hilnas
