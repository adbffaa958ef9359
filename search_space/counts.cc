#include "search_space/counts.h"

#include <algorithm>
#include <limits>

namespace hilnas {
namespace {

int64_t AttentionProjectionParams(const Arch& a) {
  const int64_t d = a.d_model;
  return d * a.q_width() + 2 * d * a.kv_width() + int64_t{a.q_width()} * d;
}

int64_t FfnParams(const Arch& a) { return 3 * int64_t{a.d_model} * a.d_ffn; }

// Sum over t in [0, n) of the keys visible to the token at position t in a
// layer of type `at` (t + 1, capped at the window for SWA), in closed form.
double SumVisibleKeys(const Arch& a, Attention at, int64_t n) {
  if (at == Attention::kSkip || n <= 0) return 0;
  if (at == Attention::kFull || n <= a.sliding_window) return 0.5 * double(n) * double(n + 1);
  const double w = a.sliding_window;
  return 0.5 * w * (w + 1) + double(n - a.sliding_window) * w;
}

// FLOPs of the transformer layers (no head) for `n` new tokens that follow
// `past` cached tokens.
double LayerFlops(const Arch& a, int64_t past, int64_t n) {
  double flops = 0;
  const double per_token_ffn = 2.0 * FfnParams(a);
  const double per_token_attn = 2.0 * AttentionProjectionParams(a);
  for (Attention at : a.attention) {
    flops += per_token_ffn * n;
    if (at == Attention::kSkip) continue;
    flops += per_token_attn * n;
    const double keys = SumVisibleKeys(a, at, past + n) - SumVisibleKeys(a, at, past);
    flops += 4.0 * a.q_width() * keys;  // QK^T and AV, 2 FLOPs per multiply-add each
  }
  return flops;
}

double HeadFlops(const Arch& a) { return 2.0 * a.vocab_size * a.d_model; }

// KVP predictor: one linear map with bias per base layer for K and one for V.
// Every aux layer has the same KV width here, so the map does not change it.
int64_t PredictorParams(const Arch& base, const Arch& aux) {
  return int64_t{base.num_attention_layers()} * 2 * (int64_t{aux.kv_width()} + 1) * base.kv_width();
}

}  // namespace

ParameterCount CountParameters(const Arch& a) {
  ParameterCount c;
  c.embedding = int64_t{a.vocab_size} * a.d_model;
  c.output_head = a.tie_embeddings ? 0 : c.embedding;
  c.norms = a.d_model;  // final norm
  for (Attention at : a.attention) {
    c.ffn += FfnParams(a);
    c.norms += a.d_model * (a.gemma ? 2 : 1);  // norm before the FFN (Gemma: and after)
    if (at == Attention::kSkip) continue;
    c.attention += AttentionProjectionParams(a);
    if (a.qkv_bias) c.attention += int64_t{a.q_width()} + 2 * int64_t{a.kv_width()};  // Qwen2
    c.norms += a.d_model * (a.gemma ? 2 : 1) + (a.qk_norm ? 2 * a.head_dim : 0);
  }
  if (a.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    // The auxiliary model is trained (KV Prediction Sec. 4.3), so even a
    // KVP-LP copy of the base has weights of its own, counted whole.
    if (auto aux = AuxiliaryArch(a); aux.ok()) {
      c.auxiliary = CountParameters(*aux).model();
      c.predictor = PredictorParams(a, *aux);
    }
  }
  return c;
}

double PrefillFlops(const Arch& a, int64_t prompt_tokens) {
  if (prompt_tokens <= 0) return 0;
  if (a.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    auto aux = AuxiliaryArch(a);
    if (aux.ok()) {
      const double predictor = 2.0 * double(CountParameters(a).predictor) * double(prompt_tokens);
      // Aux prefill (its layers only: its logits are not needed), predictor,
      // then one base step on the last prompt token using the predicted cache.
      return LayerFlops(*aux, 0, prompt_tokens) + predictor + DecodeFlops(a, prompt_tokens - 1);
    }
  }
  return LayerFlops(a, 0, prompt_tokens) + HeadFlops(a);
}

double DecodeFlops(const Arch& a, int64_t context_tokens) {
  return LayerFlops(a, context_tokens, 1) + HeadFlops(a);
}

int64_t KvCacheBytes(const Arch& a, int64_t context_tokens, int bytes_per_element) {
  const int64_t tensors = a.kv_cache == KvLayout::kSlim ? 1 : 2;
  const int sub_layers = a.ppd.k > 0 ? a.num_layers - a.ppd.layer : 0;
  int64_t elements = 0;
  for (size_t i = 0; i < a.attention.size(); ++i) {
    const Attention at = a.attention[i];
    if (at == Attention::kSkip) continue;
    const int64_t tokens = at == Attention::kSlidingWindow
                               ? std::min<int64_t>(context_tokens, a.sliding_window)
                               : context_tokens;
    const int64_t copies = 1 + (static_cast<int>(i) < sub_layers ? a.ppd.k : 0);
    elements += copies * tensors * a.kv_width() * tokens;
  }
  return elements * bytes_per_element;
}

int64_t EstimateRunBytes(const Arch& a, int64_t context_tokens, int bytes_per_element) {
  const long double weights =
      static_cast<long double>(CountParameters(a).total()) * bytes_per_element;
  const long double cache =
      static_cast<long double>(KvCacheBytes(a, context_tokens, 1)) * bytes_per_element;
  const long double total = weights + cache;
  if (!(total < static_cast<long double>(std::numeric_limits<int64_t>::max()))) {
    return std::numeric_limits<int64_t>::max();
  }
  return static_cast<int64_t>(total);
}

}  // namespace hilnas
