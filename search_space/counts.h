// Exact static counts of an architecture: parameters, FLOPs and KV-cache
// bytes. These are the proxies MobileLLM-Flash Tab. 2 compares with measured
// latency, and inputs to the latency model's features.
#ifndef HILNAS_SEARCH_SPACE_COUNTS_H_
#define HILNAS_SEARCH_SPACE_COUNTS_H_

#include <cstdint>

#include "search_space/arch.h"

namespace hilnas {

// Parameter count, broken down. With tied embeddings the output head shares
// the embedding matrix and adds nothing. A skip layer has neither attention
// weights nor the norm in front of attention. QK-norm adds two weight vectors
// of size head_dim per attention layer, shared by all heads.
struct ParameterCount {
  int64_t embedding = 0;  // vocab_size * d_model
  int64_t output_head = 0;
  int64_t attention = 0;  // q, k, v, o projections of all attention layers
  int64_t ffn = 0;        // gate, up, down of all layers
  int64_t norms = 0;      // per-layer norms, QK-norms and the final norm
  int64_t auxiliary = 0;  // KVP auxiliary model (its own weights, whole)
  int64_t predictor = 0;  // KVP linear maps, with bias, for K and V
  // The base model alone; the number papers quote.
  int64_t model() const { return embedding + output_head + attention + ffn + norms; }
  int64_t total() const { return model() + auxiliary + predictor; }
};
ParameterCount CountParameters(const Arch& arch);

// Floating-point operations (a multiply-add counts 2) of matrix products
// only; norms, RoPE, softmax and activations are elementwise and left out.
// Attention score and value products are included: a token at position t
// attends to t+1 keys under full attention and min(t+1, window) under SWA;
// skip layers have none.
//
// Prefill of `prompt_tokens` tokens, producing logits for the last position
// only (what time-to-first-token needs). A KVP architecture prefills with its
// auxiliary model, runs the predictor over every prompt position and then one
// base step (KV Prediction Sec. 4.4).
double PrefillFlops(const Arch& arch, int64_t prompt_tokens);

// One decode step with `context_tokens` tokens already in the cache.
double DecodeFlops(const Arch& arch, int64_t context_tokens);

// Bytes of the base model's KV cache holding `context_tokens` tokens with
// `bytes_per_element` (2 for fp16/bf16). SWA layers keep at most the window;
// skip layers keep nothing; a SLIM cache keeps keys only. Pipelined decoding
// (arch.ppd) adds one cache per candidate for the num_layers - ppd.layer
// layers its sub-computations run.
int64_t KvCacheBytes(const Arch& arch, int64_t context_tokens, int bytes_per_element);

// Bytes a run of `arch` holds with `context_tokens` in its cache: weights
// and KV cache at `bytes_per_element`. The one memory estimate the
// coordinator (at submission), the agents and `hilnas run` check before
// anything is allocated. Saturates at INT64_MAX instead of wrapping.
int64_t EstimateRunBytes(const Arch& arch, int64_t context_tokens, int bytes_per_element);

}  // namespace hilnas

#endif  // HILNAS_SEARCH_SPACE_COUNTS_H_
