#!/usr/bin/env bash
# Issue 40's llama.cpp check for the families hilnas reads beyond Llama and
# Qwen3: tests/reference/hf_reference.py writes random-weight checkpoints
# with the published configs' dimensions (Qwen2.5-0.5B, SmolLM3-3B, scaled
# in layers and vocabulary only) and checkpoints hilnas pruned from small
# ones; each is exported to GGUF (qwen2, smollm3, gemma3, llama4 for
# MobileLLM-R1's dense layout) and bench/eval_exact.sh
# compares `hilnas eval` with llama.cpp's mean NLL on the same windows of a
# token stream (f32 K/V caches, flash attention off).
#
#   LLAMA_DIR=/path/to/llama.cpp bash bench/family_gguf.sh [TYPES]
#
# TYPES defaults to f32,q8_0. Prints one Markdown table per checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${LLAMA_DIR:?set LLAMA_DIR to a built llama.cpp tree}"
TYPES="${1:-f32,q8_0}"
W="$(mktemp -d /tmp/hilnas-family-gguf.XXXXXX)"
trap 'rm -rf "$W"' EXIT
/usr/bin/python3 tests/reference/hf_reference.py build/tools/hilnas "$W" | grep -E "qwen2|smollm3|gemma3|llama4|mobilellm-r1|agree"
# A random walk over the ids: 60,000 tokens, below each vocabulary.
/usr/bin/python3 - "$W" <<'PY'
import sys
import numpy as np
ids = np.cumsum(np.random.default_rng(0).integers(-3, 4, size=60000))
(ids % 512).astype(np.uint16).tofile(sys.argv[1] + "/tok512.u16")
(ids % 256).astype(np.uint16).tofile(sys.argv[1] + "/tok256.u16")
PY
# name:vocabulary:window length (Gemma 3's 512-token window needs longer
# windows than 128 to matter; the pruned Gemma's window is 8).
for c in qwen2.5-0.5b:512:128 smollm3-3b:512:128 gemma3-270m:512:640 qwen2-small-pruned:256:128 \
         smollm3-small-pruned:256:128 gemma3-small-pruned:256:128 mobilellm-r1-950m:512:128 \
         mobilellm-r1-small-pruned:256:128; do
  IFS=: read -r name vocab seq <<<"$c"
  echo
  echo "### $name ($(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['architectures'][0])" "$W/$name/config.json"))"
  echo
  bash bench/eval_exact.sh "$W/$name" "$W/tok$vocab.u16" "$TYPES" "$seq" 4 2>/dev/null | grep -E "^\||^CPU" || true
done
