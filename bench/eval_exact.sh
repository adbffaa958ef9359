#!/usr/bin/env bash
# Issue 36's loss check against llama.cpp: `hilnas eval --weight-dtype T`
# against llama.cpp's mean NLL over the same held-out windows of the same
# checkpoint, which hilnas exports to GGUF at T (its Q4_0/Q8_0 tensors are
# llama-quantize --pure's bytes: bench/quant_exact.sh). Both sides use f32
# K/V caches and no flash attention (../shared/MACHINE-NOTES.md); llama.cpp
# quantizes activations to Q8_0 as hilnas does.
#
#   LLAMA_DIR=/path/to/llama.cpp bash bench/eval_exact.sh [CKPT] [TOKENS] [TYPES] [SEQ_LEN] [WINDOWS]
#
# CKPT defaults to data/demo-backbone, TOKENS to the demo corpus (built
# with `hilnas corpus`), TYPES to f32,q8_0,q4_0, SEQ_LEN 128, WINDOWS 64 (hilnas eval's
# defaults). LLAMA_DIR is a llama.cpp tree built with cmake into build/ (its
# include/ and build/bin/libllama.so); bench/llama_nll.cc is compiled against
# it here, never as part of hilnas. Prints a Markdown table, the CPU first.
set -euo pipefail
cd "$(dirname "$0")/.."
B="$PWD/build/tools/hilnas"
L="${LLAMA_DIR:?set LLAMA_DIR to a built llama.cpp tree}"
CKPT="${1:-data/demo-backbone}"
TOKENS="${2:-}"
TYPES="${3:-f32,q8_0,q4_0}"
SEQ="${4:-128}"
WINDOWS="${5:-64}"
W="$(mktemp -d /tmp/hilnas-eval-exact.XXXXXX)"
trap 'rm -rf "$W"' EXIT

if [ -z "$TOKENS" ]; then
  TOKENS="$W/corpus.bin"
  "$B" corpus --out "$TOKENS" >/dev/null
fi
g++ -O2 -std=c++17 -I"$L/include" -I"$L/ggml/include" bench/llama_nll.cc \
  -L"$L/build/bin" -Wl,-rpath,"$L/build/bin" -lllama -lggml -lggml-base -o "$W/llama_nll"

# The windows hilnas eval scores (quality/tokens.cc's SplitTokens with
# --heldout 0.05, as the eval below passes; quality/trainer.cc's HeldOutOffsets), one file of int32
# windows of SEQ + 1 for llama_nll.
python3 - "$TOKENS" "$SEQ" "$WINDOWS" "$W/windows.i32" <<'PY'
import array, sys
path, seq, windows, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ids = array.array('I' if path.endswith('.u32') else 'H')
with open(path, 'rb') as f:
    ids.frombytes(f.read())
held = ids[len(ids) - int(len(ids) * 0.05):]
fit = (len(held) - 1) // seq
windows = min(windows, fit)
w = array.array('i')
for i in range(windows):
    o = i * (fit // windows) * seq
    w.extend(int(v) for v in held[o:o + seq + 1])
with open(out, 'wb') as f:
    w.tofile(f)
PY

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'); $CKPT, $WINDOWS windows of $SEQ tokens, f32 K/V caches"
echo
echo "| weights | hilnas eval NLL | llama.cpp NLL | difference |"
echo "|---|---:|---:|---:|"
IFS=, read -ra types <<<"$TYPES"
for t in "${types[@]}"; do
  "$B" export --format gguf --ckpt "$CKPT" --out "$W/model.$t.gguf" --dtype "$t" >/dev/null
  h=$("$B" eval --ckpt "$CKPT" --tokens "$TOKENS" --heldout 0.05 --seq-len "$SEQ" --windows "$WINDOWS" \
        --weight-dtype "$t" --kv-dtype f32 --threads 2 2>&1 |
      sed -n 's/.*held-out loss \([0-9.]*\) nats.*/\1/p')
  read -r l _ <<<"$("$W/llama_nll" "$W/model.$t.gguf" "$W/windows.i32" "$SEQ" 2)"
  printf '| %s | %s | %s | %s |\n' "$t" "$h" "$l" \
    "$(awk -v a="$h" -v b="$l" 'BEGIN {d = a - b; printf "%.6f", d < 0 ? -d : d}')"
done
