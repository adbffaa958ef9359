#!/usr/bin/env bash
# Issue 40: the demo campaign's machinery on a small Gemma-3-layout backbone
# (random weights): 8 layers WWWWWFWW (Gemma 3's every-6th-global pattern),
# window 32, window layers at RoPE base 10000 and global ones at 1e6,
# sandwich norms, GeGLU, embedding x sqrt(d). The backbone is written from a
# Gemma3ForCausalLM config.json by `hilnas checkpoint init`, calibrated on
# the demo corpus, and searched by `hilnas demo` with a scaled-down
# campaign: candidates are pruned from it (local layers are W layers of the
# search space, global ones F), measured, trained and scored.
#
#   bash bench/gemma_demo.sh [OUT]     # OUT default /tmp/hilnas-gemma-demo
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-/tmp/hilnas-gemma-demo}"
rm -rf "$OUT" && mkdir -p "$OUT"
cat > "$OUT/config.json" <<'JSON'
{"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
 "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 8,
 "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
 "query_pre_attn_scalar": 32, "vocab_size": 256, "rms_norm_eps": 1e-06,
 "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "sliding_window": 32,
 "sliding_window_pattern": 6, "hidden_activation": "gelu_pytorch_tanh",
 "attn_logit_softcapping": null, "final_logit_softcapping": null,
 "attention_bias": false, "attention_dropout": 0.0, "hilnas_name": "gemma3-demo-backbone"}
JSON
bash bench/family_demo.sh "$OUT" gemma-demo \
    's|rope_theta: 10000 norm_eps: 1e-05 sliding_window: 32|rope_theta: 1000000 norm_eps: 1e-06 sliding_window: 32 qk_norm: true gemma: true local_rope_theta: 10000|'
