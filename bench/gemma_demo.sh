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
B="$PWD/build/tools/hilnas"
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
"$B" checkpoint init --arch "$OUT/config.json" --out "$OUT/backbone" --seed 3
cp data/demo-backbone/tokenizer.json "$OUT/backbone/"
"$B" corpus --out "$OUT/corpus.bin" >/dev/null
"$B" calibrate --ckpt "$OUT/backbone" --tokens "$OUT/corpus.bin" --seq-len 64 --threads 2
"$B" checkpoint check "$OUT/backbone"
sed -e "s|backbone_checkpoint: \"data/demo-backbone\"|backbone_checkpoint: \"$OUT/backbone\"|" \
    -e 's|rope_theta: 10000 norm_eps: 1e-05 sliding_window: 32|rope_theta: 1000000 norm_eps: 1e-06 sliding_window: 32 qk_norm: true gemma: true local_rope_theta: 10000|' \
    -e 's|^  attention_choices: SKIP$||' \
    -e 's|stage1_latency_points: 24|stage1_latency_points: 8|' \
    -e 's|stage1_sobol_points: 16|stage1_sobol_points: 6|' \
    -e 's|stage2_trials: 24|stage2_trials: 6|' \
    -e 's|stage2_initial_points: 8|stage2_initial_points: 4|' \
    -e 's|^name: "demo"|name: "gemma-demo"|' \
    configs/demo-campaign.textproto > "$OUT/campaign.textproto"
"$B" demo --config "$OUT/campaign.textproto" --out "$OUT/demo"
