// The allocation-free decode step (issue 22): one f32 token through the
// model in raw loops over per-thread buffers, the same kernels and formulas
// as the ATen modules (decoder_test holds them to it token for token).
#include <algorithm>

#include "model/gemv.h"
#include "model/internal/decoder_layers.h"
#include "util/aligned.h"

namespace hilnas {
namespace decoder_internal {
namespace {

// What DecoderImpl::DecodeStep writes between its kernels, one token's
// worth, kept per thread (pipelined decoding steps several caches of one
// decoder from threads at once).
struct DecodeBuffers {
  // Cache-line aligned (util/aligned.h), as the kernels' vector loads want.
  AlignedVector<float> x, normed, out, q, q_rot, k, v, k_rot, head, attn, gate, up;
  void Reserve(const Arch& a) {  // a no-op once grown
    for (auto* b : {&x, &normed, &out}) b->resize(std::max<size_t>(b->size(), a.d_model));
    for (auto* b : {&q, &q_rot, &attn}) b->resize(std::max<size_t>(b->size(), a.q_width()));
    for (auto* b : {&k, &v, &k_rot}) b->resize(std::max<size_t>(b->size(), a.kv_width()));
    for (auto* b : {&gate, &up}) b->resize(std::max<size_t>(b->size(), a.d_ffn));
    head.resize(std::max<size_t>(head.size(), a.head_dim));
  }
};

// row += bias (an f32 decoder's bias: DecodeStep runs f32 activations only).
void AddRow(float* row, const torch::Tensor& bias, int64_t n) {
  const float* b = bias.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) row[i] += b[i];
}

// Row `token` of an embedding table stored in f32, bf16, f16 or quantized
// (either form, model/quant.h), as f32.
void EmbeddingRow(const torch::Tensor& table, int64_t token, float* out) {
  if (QuantTypeOf(table)) return DequantizeMatrixRow(table, token, out);
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

// This position's rotated keys and values (kvh rows of hd floats each)
// into its slot of a layer's cache, then one query per head over the slots
// filled. The cache holds f32, f16 (--kv-dtype f16: rounded once, as
// stored) or Q8_0 blocks (--kv-dtype q8_0: each row quantized as the ATen
// path's ToCacheForm does).
//
// `chunk` > 0 (Llama 4's chunked layers, full caches): the query attends to
// the keys of its own chunk only, positions pos / chunk * chunk .. pos.
void StoreAndAttend(torch::Tensor& cache_k, torch::Tensor& cache_v, const float* k, const float* v,
                    const float* q, int64_t h, int64_t kvh, int64_t hd, int64_t pos, float* out,
                    bool window_layer, int64_t chunk) {
  const int64_t slots = cache_k.size(2), head_stride = cache_k.stride(1);
  const int64_t row = cache_k.size(3);       // a row's length in the cache's elements
  const int64_t slot = (pos % slots) * row;  // the row's offset in each head
  int64_t n = std::min(pos + 1, slots);      // a ring's slots hold the last n positions
  int64_t first = 0;                         // offset of the first key read in each head
  if (chunk > 0) {
    n = pos - pos / chunk * chunk + 1;
    first = (pos + 1 - n) * row;
  }
  if (cache_k.scalar_type() == torch::kByte) {
    uint8_t* kp = cache_k.data_ptr<uint8_t>();
    uint8_t* vp = cache_v.data_ptr<uint8_t>();
    for (int64_t j = 0; j < kvh; ++j) {
      QuantizeActivationsFast(k + j * hd, hd, kp + j * head_stride + slot);
      QuantizeActivationsFast(v + j * hd, hd, vp + j * head_stride + slot);
    }
    DecodeAttention(q, h, kvh, hd, kp + first, vp + first, head_stride, n, pos + 1 - n, pos, out,
                    window_layer);
    return;
  }
  if (cache_k.scalar_type() == torch::kHalf) {
    auto* kp = reinterpret_cast<uint16_t*>(cache_k.data_ptr<at::Half>());
    auto* vp = reinterpret_cast<uint16_t*>(cache_v.data_ptr<at::Half>());
    for (int64_t j = 0; j < kvh; ++j) {  // c10::Half's bits (NarrowToHalvesTest)
      NarrowToHalves(k + j * hd, hd, kp + j * head_stride + slot);
      NarrowToHalves(v + j * hd, hd, vp + j * head_stride + slot);
    }
    DecodeAttention(q, h, kvh, hd, kp + first, vp + first, head_stride, n, pos + 1 - n, pos, out,
                    window_layer);
    return;
  }
  float* kp = cache_k.data_ptr<float>();
  float* vp = cache_v.data_ptr<float>();
  for (int64_t j = 0; j < kvh; ++j) {
    std::copy(k + j * hd, k + (j + 1) * hd, kp + j * head_stride + slot);
    std::copy(v + j * hd, v + (j + 1) * hd, vp + j * head_stride + slot);
  }
  DecodeAttention(q, h, kvh, hd, kp + first, vp + first, head_stride, n, pos + 1 - n, pos, out,
                  window_layer);
}

}  // namespace

bool DecoderImpl::CanDecodeInPlace(const torch::Tensor& tokens, const KvCache& cache) const {
  return tokens.numel() == 1 && tokens.dim() == 2 && tokens.scalar_type() == torch::kLong &&
         CanDecodeInPlace(cache);
}

bool DecoderImpl::CanDecodeInPlace(const KvCache& cache) const {
  if (!in_place_decode_ || dtype_ != torch::kFloat || torch::GradMode::is_enabled() ||
      cache.slim()) {
    return false;
  }
  for (int i = 0; i < arch_.num_layers; ++i) {
    if (arch_.attention[i] == Attention::kSkip) continue;
    const torch::Tensor& k = cache.keys(i);
    const torch::Tensor& v = cache.values(i);
    if (!k.defined() || !v.defined() || k.size(0) != 1 || !k.is_contiguous() ||
        !v.is_contiguous() ||
        (k.scalar_type() != torch::kFloat && k.scalar_type() != torch::kHalf &&
         k.scalar_type() != torch::kByte)) {
      return false;
    }
  }
  return true;
}

torch::Tensor DecoderImpl::DecodeStep(int64_t token, KvCache& cache) {
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
  if (a.gemma) {
    const float scale = static_cast<float>(EmbedScale());
    for (int64_t j = 0; j < d; ++j) x[j] *= scale;
  }
  const float* global_cos = cos_table_.data_ptr<float>() + pos * hd;
  const float* global_sin = sin_table_.data_ptr<float>() + pos * hd;
  const bool local_rope = local_inv_freq_.defined();
  const float* local_cos = local_rope ? local_cos_.data_ptr<float>() + pos * hd : global_cos;
  const float* local_sin = local_rope ? local_sin_.data_ptr<float>() + pos * hd : global_sin;
  auto add_into_x = [&](const float* y) {
    for (int64_t j = 0; j < d; ++j) x[j] += y[j];
  };
  // Gemma's norm of a block's output before the residual, in place in `out`.
  auto norm_out = [&](const RmsNorm& norm) -> const float* {
    RmsNormRow(out, norm->weight.data_ptr<float>(), d, norm->eps, normed);
    std::copy(normed, normed + d, out);
    return out;
  };
  for (int i = 0; i < a.num_layers; ++i) {
    LayerImpl& layer = *model_->typed_layers[i];
    if (layer.self_attn) {
      AttentionBlockImpl& at = *layer.self_attn;
      const bool local = a.attention[i] == Attention::kSlidingWindow;
      const float* cos = local ? local_cos : global_cos;
      const float* sin = local ? local_sin : global_sin;
      RmsNormRow(x, layer.input_layernorm->weight.data_ptr<float>(), d, layer.input_layernorm->eps,
                 normed);
      float *q = buf.q.data(), *k = buf.k.data(), *v = buf.v.data();
      const GemvProduct qkv[3] = {
          {&at.q_proj->weight, q}, {&at.k_proj->weight, k}, {&at.v_proj->weight, v}};
      WeightGemvsInto(qkv, 3, normed);
      if (a.qkv_bias) {  // Qwen2
        AddRow(q, at.q_proj->bias, a.q_width());
        AddRow(k, at.k_proj->bias, a.kv_width());
        AddRow(v, at.v_proj->bias, a.kv_width());
      }
      // QK-norm, then RoPE (none in a NoPE layer), per head (the ATen path's order).
      auto rotate = [&](float* row, const RmsNorm& norm, float* dst) {
        if (a.qk_norm) {
          RmsNormRow(row, norm->weight.data_ptr<float>(), hd, norm->eps, buf.head.data());
          row = buf.head.data();
        }
        if (a.qk_l2_norm && at.rope) {  // Llama 4: RMS 1, no weight
          UnitRmsRow(row, hd, a.norm_eps, buf.head.data());
          row = buf.head.data();
        }
        if (at.rope) {
          RopeRow(row, cos, sin, hd, dst);
        } else {
          std::copy(row, row + hd, dst);
        }
      };
      float* q_rot = buf.q_rot.data();
      for (int64_t j = 0; j < h; ++j) rotate(q + j * hd, at.q_norm, q_rot + j * hd);
      if (!at.rope && a.temperature_floor_scale > 0) {  // Llama 4's temperature tuning
        const float factor = static_cast<float>(QueryTemperature(a, pos));
        for (int64_t j = 0; j < h * hd; ++j) q_rot[j] *= factor;
      }
      float* k_rot = buf.k_rot.data();
      for (int64_t j = 0; j < kvh; ++j) rotate(k + j * hd, at.k_norm, k_rot + j * hd);
      StoreAndAttend(cache.keys(i), cache.values(i), k_rot, v, q_rot, h, kvh, hd, pos,
                     buf.attn.data(), a.attention[i] == Attention::kSlidingWindow,
                     a.rotates(i) ? a.attention_chunk : 0);
      const GemvProduct o{&at.o_proj->weight, out};
      WeightGemvsInto(&o, 1, buf.attn.data());
      add_into_x(layer.attn_out_norm ? norm_out(layer.attn_out_norm) : out);
    }
    RmsNormRow(x, layer.ffn_norm->weight.data_ptr<float>(), d, layer.ffn_norm->eps, normed);
    MlpImpl& mlp = *layer.mlp;
    float *gate = buf.gate.data(), *up = buf.up.data();
    const GemvProduct gate_up[2] = {{&mlp.gate_proj->weight, gate}, {&mlp.up_proj->weight, up}};
    WeightGemvsInto(gate_up, 2, normed);
    if (mlp.geglu) {
      GeGluRow(gate, up, a.d_ffn, gate);
    } else {
      SwiGluRow(gate, up, a.d_ffn, gate);
    }
    const GemvProduct down{&mlp.down_proj->weight, out};
    WeightGemvsInto(&down, 1, gate);
    add_into_x(layer.ffn_out_norm ? norm_out(layer.ffn_out_norm) : out);
  }
  RmsNormRow(x, model_->norm->weight.data_ptr<float>(), d, model_->norm->eps, normed);
  torch::Tensor logits = torch::empty({1, 1, a.vocab_size});
  const GemvProduct head{a.tie_embeddings ? &model_->embed_tokens->weight : &lm_head_->weight,
                         logits.data_ptr<float>()};
  WeightGemvsInto(&head, 1, normed);
  return logits;
}

}  // namespace decoder_internal
}  // namespace hilnas
