// Small architectures shared by model tests.
#ifndef HILNAS_MODEL_TEST_ARCHS_H_
#define HILNAS_MODEL_TEST_ARCHS_H_

#include "search_space/arch.h"

namespace hilnas {

// Four layers covering every attention type: full, SWA (window 3), skip,
// full; GQA with QK-norm; untied head.
inline Arch TinyMixedArch() {
  Arch a;
  a.name = "tiny-mixed";
  a.num_layers = 4;
  a.d_model = 32;
  a.d_ffn = 64;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 8;
  a.vocab_size = 50;
  a.tie_embeddings = false;
  a.qk_norm = true;
  a.rope_theta = 10000;
  a.norm_eps = 1e-5;
  a.attention = {Attention::kFull, Attention::kSlidingWindow, Attention::kSkip, Attention::kFull};
  a.sliding_window = 3;
  return a;
}

// Llama 4 text's layout (dense): every layer full, the weightless QK-norm,
// layer 3 NoPE.
inline Arch TinyLlama4Arch() {
  Arch a = TinyMixedArch();
  a.name = "tiny-llama4";
  a.qk_norm = false;
  a.llama4 = true;
  a.qk_l2_norm = true;
  a.attention.assign(4, Attention::kFull);
  a.sliding_window = 0;
  a.no_rope = {false, false, false, true};
  return a;
}

// TinyMixedArch with multi-head attention (4 heads x 8 = d_model 32), the
// shape slim attention applies to.
inline Arch TinyMhaArch() {
  Arch a = TinyMixedArch();
  a.name = "tiny-mha";
  a.num_kv_heads = 4;
  return a;
}

}  // namespace hilnas

#endif  // HILNAS_MODEL_TEST_ARCHS_H_
