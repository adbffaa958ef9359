#!/usr/bin/env bash
# Issue 40: the demo campaign's machinery on a small MobileLLM-Pro-layout
# backbone (random weights). MobileLLM-Pro (MobileLLM-Flash Tab. 5, its
# model card) interleaves local and global attention 3:1 with the first
# and last layers global, a 512-token window, 4:1 grouped-query attention
# and a tied embedding; here 8 layers F W W W F W W F, window 32, heads
# 8/2 x 32, d 256, SwiGLU 768. The published MobileLLMP1ForCausalLM class is
# refused by name (its remote modelling code could not be read here), so
# the layout is written as a Llama checkpoint with hilnas's layer_types
# extension: local layers are sliding_attention (W layers of the search
# space), global ones full (F). The backbone is written by `hilnas
# checkpoint init`, calibrated, and searched by `hilnas demo` with a
# scaled-down campaign: candidates are pruned from it, measured by two
# local agents, trained and scored.
#
#   bash bench/mobilellm_pro_demo.sh [OUT]   # OUT default /tmp/hilnas-mobilellm-pro-demo
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-/tmp/hilnas-mobilellm-pro-demo}"
rm -rf "$OUT" && mkdir -p "$OUT"
cat > "$OUT/config.json" <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama",
 "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 8,
 "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
 "vocab_size": 256, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
 "tie_word_embeddings": true, "sliding_window": 32,
 "layer_types": ["full_attention", "sliding_attention", "sliding_attention",
                 "sliding_attention", "full_attention", "sliding_attention",
                 "sliding_attention", "full_attention"],
 "hidden_act": "silu", "attention_bias": false, "mlp_bias": false,
 "hilnas_name": "mobilellm-pro-layout-demo-backbone"}
JSON
bash bench/family_demo.sh "$OUT" mobilellm-pro-demo
