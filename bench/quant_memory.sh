#!/usr/bin/env bash
# Peak memory of a quantized run against the f32 one (issue 36): `hilnas
# run` on random weights at f32, q8_0 and q4_0 weights (and a q8_0 KV
# cache), each in its own process; prints weights as stored, the KV cache
# and the peak RSS, and the q4_0 run's peak RSS as a fraction of the f32
# run's weight bytes plus its cache.
#
#   bash bench/quant_memory.sh [SHAPE] [PROMPT] [CHUNK]
#     SHAPE   llama1b (default; Llama 3.2 1B's shape, 1.2 B parameters,
#             4.9 GB at f32) or full4 (small: the process itself dominates)
#     PROMPT  prompt tokens (default 512); 8 tokens are decoded after it
#     CHUNK   prefill chunk (default PROMPT: one chunk); a chunk's
#             activations are part of the peak
#
# A random-weight model is stored at its precision as each matrix is drawn
# (Decoder::Create with a weight dtype), so the q4_0 process never holds the
# f32 model. Results: bench/data/quant-memory.md.
set -euo pipefail
cd "$(dirname "$0")/.."
SHAPE="${1:-llama1b}"
PROMPT="${2:-512}"
CHUNK="${3:-$PROMPT}"
B="$PWD/build/tools/hilnas"
W="$(mktemp -d /tmp/hilnas-quant-memory.XXXXXX)"
trap 'rm -rf "$W"' EXIT

arch() {  # NAME LAYERS D FFN HEADS KV VOCAB (all layers full)
  {
    echo "name: \"$1\" num_layers: $2 d_model: $3 d_ffn: $4 num_heads: $5"
    echo "num_kv_heads: $6 head_dim: 64 vocab_size: $7 tie_embeddings: true"
    echo "rope_theta: 10000 norm_eps: 1e-05 qk_norm: true"
    for _ in $(seq "$2"); do echo "attention: FULL"; done
  } >"$W/$1.textproto"
}
arch full4 4 512 1536 8 2 4096
arch llama1b 16 2048 8192 32 8 128256
[ -f "$W/$SHAPE.textproto" ] || { echo "quant_memory.sh: unknown shape $SHAPE" >&2; exit 2; }

lscpu | sed -n 's/^Model name: *//p' | sed 's/^/CPU: /'
echo "shape $SHAPE, prompt $PROMPT tokens in chunks of $CHUNK, 8 decoded, 2 threads"
echo
echo "| weights | KV cache | weights MiB | KV cache MiB | peak RSS MiB | TTFT ms | decode ms/token |"
echo "|---|---|---:|---:|---:|---:|---:|"
declare -A peak cache weights
for run in "f32 f32" "q8_0 f32" "q4_0 f32" "q4_0 q8_0"; do
  set -- $run
  "$B" run --arch "$W/$SHAPE.textproto" --prompt-tokens "$PROMPT" --prefill-chunk "$CHUNK" \
      --max-new-tokens 8 --threads 2 \
      --weight-dtype "$1" --kv-dtype "$2" >"$W/out.txt" 2>&1 || { cat "$W/out.txt"; exit 1; }
  read -r w p < <(sed -n 's/^memory: weights \([0-9.]*\) MiB as stored, peak RSS \([0-9.]*\) MiB$/\1 \2/p' "$W/out.txt")
  read -r kv ttft dec < <(sed -n 's/^stats: //p' "$W/out.txt" | /usr/bin/python3 -c \
      'import json,sys; j=json.load(sys.stdin); print(j["kv_cache_bytes"] / 2**20, j["ttft_ms"], j["decode_ms_per_token"])')
  printf '| %s | %s | %.1f | %.1f | %.1f | %.1f | %.2f |\n' "$1" "$2" "$w" "$kv" "$p" "$ttft" "$dec"
  peak["$1 $2"]=$p; cache["$1 $2"]=$kv; weights["$1 $2"]=$w
done
echo
/usr/bin/python3 - "${weights[f32 f32]}" "${cache[f32 f32]}" "${peak[q4_0 f32]}" "${peak[q4_0 q8_0]}" <<'EOF'
import sys
w, kv, p4, p48 = map(float, sys.argv[1:])
print(f"q4_0 peak RSS / (f32 weights + f32 cache) = {p4 / (w + kv):.3f} (f32 cache), "
      f"{p48 / (w + kv):.3f} (q8_0 cache)")
EOF
