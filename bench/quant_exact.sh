#!/usr/bin/env bash
# Issue 36's exactness check against llama.cpp: the Q4_0 and Q8_0 tensors
# `hilnas export --format gguf --dtype q4_0|q8_0` writes are the bytes
# `llama-quantize --pure` makes from hilnas's f32 export of the same
# checkpoint, for every tensor (bench/gguf_tensors_equal.py).
#
#   LLAMA_QUANTIZE=/path/to/llama-quantize bash bench/quant_exact.sh [CKPT...]
#
# Without checkpoints: bench/runtime_compare.sh's full4 and a Llama-layout
# model (untied head, no QK-norm), random weights. model/gguf_test's
# QuantizedTensorsAreLlamaQuantizesBytes checks the same on fingerprints
# recorded from llama-quantize, without llama.cpp.
set -euo pipefail
cd "$(dirname "$0")/.."
B="$PWD/build/tools/hilnas"
LQ="${LLAMA_QUANTIZE:?set LLAMA_QUANTIZE to a llama-quantize binary}"
W="$(mktemp -d /tmp/hilnas-quant-exact.XXXXXX)"
trap 'rm -rf "$W"' EXIT
ckpts=("$@")
if [ ${#ckpts[@]} -eq 0 ]; then
  cat >"$W/full4.textproto" <<'ARCH'
name: "full4" num_layers: 4 d_model: 512 d_ffn: 1536 num_heads: 8 num_kv_heads: 2 head_dim: 64
vocab_size: 4096 tie_embeddings: true rope_theta: 10000 norm_eps: 1e-05 qk_norm: true
attention: FULL attention: FULL attention: FULL attention: FULL
ARCH
  cat >"$W/llama2.textproto" <<'ARCH'
name: "llama2" num_layers: 2 d_model: 256 d_ffn: 704 num_heads: 4 num_kv_heads: 4 head_dim: 64
vocab_size: 1024 tie_embeddings: false rope_theta: 500000 norm_eps: 1e-05
attention: FULL attention: FULL
ARCH
  for a in full4 llama2; do
    "$B" checkpoint init --arch "$W/$a.textproto" --out "$W/$a" --seed 3 >/dev/null
    ckpts+=("$W/$a")
  done
fi
status=0
for c in "${ckpts[@]}"; do
  n=$(basename "$c")
  "$B" export --format gguf --ckpt "$c" --out "$W/$n.f32.gguf" --dtype f32 >/dev/null
  for t in q4_0 q8_0; do
    "$B" export --format gguf --ckpt "$c" --out "$W/$n.$t.gguf" --dtype "$t" >/dev/null
    "$LQ" --pure "$W/$n.f32.gguf" "$W/$n.$t.llama.gguf" "${t^^}" >/dev/null 2>&1
    printf '%s %s: ' "$n" "$t"
    python3 bench/gguf_tensors_equal.py "$W/$n.$t.gguf" "$W/$n.$t.llama.gguf" | tail -1 || status=1
  done
done
exit $status
