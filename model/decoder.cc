#include "model/decoder.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "absl/strings/str_cat.h"

namespace hilnas {
namespace {

namespace F = torch::nn::functional;

// Root-mean-square norm (Zhang & Sennrich) with a learned scale, as in Llama.
struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t dim, double eps) : eps(eps) {
    weight = register_parameter("weight", torch::ones({dim}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
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
torch::Tensor Project(const torch::Tensor& x, const torch::Tensor& w) {
  if (x.numel() == w.size(1)) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    return torch::mv(w, x.reshape({-1})).view(shape);
  }
  return torch::matmul(x, w.t());
}

// Rotary embedding in the Hugging Face "rotate half" layout: dimension i is
// paired with i + head_dim/2.
torch::Tensor ApplyRope(const torch::Tensor& x, const torch::Tensor& cos,
                        const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto x1 = x.narrow(-1, 0, half);
  auto x2 = x.narrow(-1, half, half);
  return x * cos + torch::cat({-x2, x1}, -1) * sin;
}

struct AttentionBlockImpl : torch::nn::Module {
  AttentionBlockImpl(const Arch& a, Attention type) : arch(a), type(type) {
    q_proj = register_module("q_proj", MakeLinear(a.d_model, a.q_width()));
    k_proj = register_module("k_proj", MakeLinear(a.d_model, a.kv_width()));
    v_proj = register_module("v_proj", MakeLinear(a.d_model, a.kv_width()));
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
    const int64_t b = x.size(0), t = x.size(1);
    const int64_t h = arch.num_heads, kvh = arch.num_kv_heads, hd = arch.head_dim;
    auto q = Project(x, q_proj->weight).view({b, t, h, hd});
    torch::Tensor k, v;
    if (provided != nullptr) {
      k = provided->keys;
      v = provided->values;
    } else {
      k = Project(x, k_proj->weight).view({b, t, kvh, hd});
      v = Project(x, v_proj->weight).view({b, t, kvh, hd});
    }
    if (observer != nullptr) observer->OnKeysValues(layer, k, v);
    if (arch.qk_norm) q = q_norm(q);
    q = ApplyRope(q, cos.view({1, t, 1, hd}), sin.view({1, t, 1, hd})).transpose(1, 2);
    k = RotatedKeys(k, cos, sin);  // [B, KVH, T, hd]
    v = v.transpose(1, 2);

    int64_t key_start = 0;  // absolute position of the first key read
    torch::Tensor keys = k, values = v;
    const int64_t end = start + t;
    if (cache_k != nullptr) {
      cache_k->narrow(2, start, t).copy_(k);
      cache_v->narrow(2, start, t).copy_(v);
      if (type == Attention::kSlidingWindow) {
        key_start = std::max<int64_t>(0, start - arch.sliding_window + 1);
      }
      keys = cache_k->narrow(2, key_start, end - key_start);
      values = cache_v->narrow(2, key_start, end - key_start);
    }
    const int64_t n_keys = keys.size(2);
    const int64_t groups = h / kvh;
    auto qg = q.view({b, kvh, groups, t, hd});
    auto scores = torch::matmul(qg, keys.unsqueeze(2).transpose(-1, -2)) /
                  std::sqrt(static_cast<double>(hd));  // [B, KVH, G, T, S]
    // Causal (and window) mask; a single full-attention query needs none.
    if (t > 1 || type == Attention::kSlidingWindow) {
      auto opts = torch::TensorOptions().dtype(torch::kLong);
      auto qpos = torch::arange(start, end, opts).view({t, 1});
      auto kpos = torch::arange(key_start, key_start + n_keys, opts).view({1, n_keys});
      auto blocked = kpos > qpos;
      if (type == Attention::kSlidingWindow) {
        blocked = blocked.logical_or(qpos - kpos >= arch.sliding_window);
      }
      scores = scores.masked_fill(blocked, -std::numeric_limits<double>::infinity());
    }
    auto probs = torch::softmax(scores, -1);
    auto out = torch::matmul(probs, values.unsqueeze(2));  // [B, KVH, G, T, hd]
    out = out.view({b, h, t, hd}).transpose(1, 2).reshape({b, t, h * hd});
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
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
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
    auto hidden = F::silu(Project(x, gate_proj->weight)) * Project(x, up_proj->weight);
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
  explicit BackboneImpl(const Arch& a) {
    embed_tokens = register_module("embed_tokens", torch::nn::Embedding(a.vocab_size, a.d_model));
    layers = register_module("layers", torch::nn::ModuleList());
    for (Attention at : a.attention) {
      Layer l(a, at);
      layers->push_back(l);
      typed_layers.push_back(l);
    }
    norm = register_module("norm", RmsNorm(a.d_model, a.norm_eps));
  }
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  std::vector<Layer> typed_layers;
  RmsNorm norm{nullptr};
};
TORCH_MODULE(Backbone);

}  // namespace

class DecoderImpl : public torch::nn::Module {
 public:
  DecoderImpl(const Arch& a, torch::Dtype dtype) : arch_(a), dtype_(dtype) {
    model_ = register_module("model", Backbone(a));
    if (!a.tie_embeddings)
      lm_head_ = register_module("lm_head", MakeLinear(a.d_model, a.vocab_size));
    // RoPE inverse frequencies: theta^(-2i/hd), i < hd/2.
    inv_freq_ = torch::pow(a.rope_theta, -torch::arange(0, a.head_dim, 2, torch::kDouble) /
                                             static_cast<double>(a.head_dim));
  }

  // RoPE tables for positions start..start+t-1, [t, head_dim] each.
  std::pair<torch::Tensor, torch::Tensor> Rope(int64_t start, int64_t t) const {
    auto pos = torch::arange(start, start + t, torch::kDouble);
    auto freqs = torch::outer(pos, inv_freq_);
    auto emb = torch::cat({freqs, freqs}, -1);
    return {emb.cos().to(dtype_), emb.sin().to(dtype_)};
  }

  torch::Tensor Run(const torch::Tensor& tokens, int64_t start, KvCache* cache, bool last_only,
                    ForwardObserver* observer = nullptr,
                    const std::vector<LayerKv>* provided = nullptr) {
    const int64_t t = tokens.size(1);
    const auto [cos, sin] = Rope(start, t);
    auto x = model_->embed_tokens(tokens);
    for (size_t i = 0; i < model_->typed_layers.size(); ++i) {
      torch::Tensor* ck = cache ? &cache->keys(static_cast<int>(i)) : nullptr;
      torch::Tensor* cv = cache ? &cache->values(static_cast<int>(i)) : nullptr;
      x = model_->typed_layers[i]->forward(x, start, cos, sin, ck, cv, observer,
                                           static_cast<int>(i),
                                           provided ? &(*provided)[i] : nullptr);
    }
    if (last_only) x = x.narrow(1, t - 1, 1);
    x = model_->norm(x);
    const auto& head = arch_.tie_embeddings ? model_->embed_tokens->weight : lm_head_->weight;
    return Project(x, head);
  }

  Arch arch_;
  torch::Dtype dtype_;
  Backbone model_{nullptr};
  torch::nn::Linear lm_head_{nullptr};
  torch::Tensor inv_freq_;
};

KvCache::KvCache(const Arch& arch, int64_t batch, int64_t capacity, torch::Dtype dtype)
    : capacity_(capacity) {
  for (Attention at : arch.attention) {
    if (at == Attention::kSkip) {
      keys_.emplace_back();
      values_.emplace_back();
      continue;
    }
    keys_.push_back(torch::zeros({batch, arch.num_kv_heads, capacity, arch.head_dim}, dtype));
    values_.push_back(torch::zeros({batch, arch.num_kv_heads, capacity, arch.head_dim}, dtype));
  }
}

int64_t KvCache::bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < keys_.size(); ++i) {
    if (keys_[i].defined()) n += keys_[i].nbytes() + values_[i].nbytes();
  }
  return n;
}

absl::StatusOr<Decoder> Decoder::Create(const Arch& arch, uint64_t seed, torch::Dtype dtype) {
  absl::Status valid = ValidateArch(arch);
  if (!valid.ok()) return valid;
  try {
    auto impl = std::make_shared<DecoderImpl>(arch, dtype);
    torch::NoGradGuard no_grad;
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
      t.normal_(0.0, std, gen);
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
torch::nn::Module& Decoder::module() { return *impl_; }

torch::Tensor Decoder::Forward(const torch::Tensor& tokens, ForwardObserver* observer) {
  return impl_->Run(tokens, 0, nullptr, false, observer);
}

torch::Tensor Decoder::ForwardCached(const torch::Tensor& tokens, KvCache& cache, bool last_only) {
  const int64_t start = cache.length();
  TORCH_CHECK(start + tokens.size(1) <= cache.capacity(), "KV cache overflow: ", start, " + ",
              tokens.size(1), " > capacity ", cache.capacity());
  auto logits = impl_->Run(tokens, start, &cache, last_only);
  cache.Advance(tokens.size(1));
  return logits;
}

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
  int64_t t = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i]->self_attn) continue;
    t = kv[i].keys.size(1);
    TORCH_CHECK(t <= cache.capacity(), "FillCache: ", t, " tokens > capacity ", cache.capacity());
    const auto [cos, sin] = impl_->Rope(0, t);
    cache.keys(static_cast<int>(i))
        .narrow(2, 0, t)
        .copy_(layers[i]->self_attn->RotatedKeys(kv[i].keys, cos, sin));
    cache.values(static_cast<int>(i)).narrow(2, 0, t).copy_(kv[i].values.transpose(1, 2));
  }
  cache.Advance(t);
}

KvCache Decoder::NewCache(int64_t batch, int64_t capacity) const {
  return KvCache(impl_->arch_, batch, capacity, impl_->dtype_);
}

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
      out.push_back({p + "self_attn.v_proj.weight", {a.kv_width(), a.d_model}});
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
