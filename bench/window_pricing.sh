#!/usr/bin/env bash
# What a sliding-window layer costs inside the whole model, against a full
# layer (issue 35, item 2): four variants of one 4-layer shape (d 512, f 1536,
# 8/2 heads x 64, vocab 4096, window 128): all-full F F F F, mixed F W W F,
# all-window W W W W and all-skip K K K K, at PROMPT tokens (default 2048).
#
#   bash bench/window_pricing.sh [PROMPT] [THREADS] [ROUNDS]
#
# ROUNDS (default 5) rounds, each timing the four variants once, in an order
# that rotates from round to round; every ratio is taken within a round and
# the median over rounds is reported with its range. These machines are
# shared: a burst of another tenant's work during one variant's run moved a
# ratio by 10-15% when each variant's repeats ran back to back.
#
# Two figures per variant, both from whole-model runs:
#  - attention: the model's own attention kernel time per prefill and per
#    decode step (hilnas::attention, and hilnas::attention_window for window
#    layers, in bench/step_profile, which times every
#    op of a real prefill and decode of the model); window / full is
#    all-window's over all-full's, the price of the window itself. Those
#    two come from two processes, and a shared host's speed drifts between
#    processes (a lent Xeon VM's differed by up to 1.4x): a second form of
#    that ratio divides each process's attention time by its own prompt
#    products' (hilnas::prompt_mm, prefill) or weight products'
#    (hilnas::gemv, decode) time, which is the same work in both models
#    (same widths, same layers), so the host's drift cancels.
#  - layer: TTFT and decode ms/token of `hilnas run` (one process a round,
#    after WARMUPS untimed generations, default 1, as
#    bench/runtime_compare.sh); (all-window - all-skip) / (all-full - all-skip) prices the
#    whole layer, Q/K/V/O projections and norms included, which a window
#    does not shrink: at d 512 and 2048 tokens the projections alone are
#    about a third of a full layer's time, so this ratio cannot fall to a
#    window's share of the keys.
# Prints Markdown; the CPU's model name first.
set -euo pipefail
cd "$(dirname "$0")/.."
PROMPT="${1:-2048}"
THREADS="${2:-1}"
ROUNDS="${3:-5}"
B="$PWD/build/tools/hilnas"
P="$PWD/build/bench/step_profile"
W="$(mktemp -d /tmp/hilnas-window-pricing.XXXXXX)"
trap 'rm -rf "$W"' EXIT

arch() {  # NAME ATTENTION...
  local name=$1
  shift
  {
    echo "name: \"$name\" num_layers: 4 d_model: 512 d_ffn: 1536 num_heads: 8"
    echo "num_kv_heads: 2 head_dim: 64 vocab_size: 4096 tie_embeddings: true"
    echo "rope_theta: 10000 norm_eps: 1e-05 qk_norm: true sliding_window: 128"
    for a in "$@"; do echo "attention: $a"; done
  } >"$W/$name.textproto"
  "$B" checkpoint init --arch "$W/$name.textproto" --out "$W/$name" --seed 1 >/dev/null
}
F=FULL S=SLIDING_WINDOW K=SKIP
arch all-full $F $F $F $F
arch mixed $F $S $S $F
arch all-window $S $S $S $S
arch all-skip $K $K $K $K
variants=(all-full mixed all-window all-skip)

# One variant once: "round variant attention-prefill attention-decode ttft
# decode full-prefill window-prefill full-decode window-decode".
measure() {  # ROUND VARIANT
  local v=$2
  # step_profile prints the prefill table, then the decode table. Full
  # layers' attention is hilnas::attention, window layers'
  # hilnas::attention_window (model/attention.h).
  "$P" --arch "$W/$v.textproto" --prompt "$PROMPT" --threads "$THREADS" --decode-tokens 64 \
      --repeats 1 >"$W/$v.profile" 2>&1
  read -r fp wp fd wd ap ad mp md <<<"$(awk -F'|' '/^prefill:/{ph = 1} /^decode:/{ph = 2}
      /^\| hilnas::attention /{gsub(/ /, "", $4); f[ph] = $4}
      /^\| hilnas::attention_window /{gsub(/ /, "", $4); w[ph] = $4}
      /^\| hilnas::prompt_mm /{gsub(/ /, "", $4); m[ph] = $4}
      /^\| hilnas::gemv /{gsub(/ /, "", $4); g[ph] = $4}
      END {printf "%s %s %s %s %s %s %s %s\n", f[1] + 0, w[1] + 0, f[2] + 0, w[2] + 0,
                  f[1] + w[1], f[2] + w[2], m[1] + 0, g[2] + 0}' "$W/$v.profile")"
  read -r t d <<<"$("$B" run --ckpt "$W/$v" --prompt-tokens "$PROMPT" --max-new-tokens 65 \
      --threads "$THREADS" --warmups "${WARMUPS:-1}" 2>&1 |
    sed -n 's/^stats: //p' |
    /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["ttft_ms"], j["decode_ms_per_token"])')"
  echo "$1 $v $ap $ad $t $d $fp $wp $fd $wd $mp $md" >>"$W/all.txt"
}

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; prompt $PROMPT, $THREADS thread(s), window 128, $ROUNDS rounds"
for round in $(seq "$ROUNDS"); do
  for i in 0 1 2 3; do
    measure "$round" "${variants[$(((i + round) % 4))]}"
  done
  echo "round $round/$ROUNDS done" >&2
done
echo
/usr/bin/python3 - "$W/all.txt" <<'PY'
import statistics, sys
rows = {}  # (round, variant) -> figures
for line in open(sys.argv[1]):
    f = line.split()
    rows[(int(f[0]), f[1])] = [float(x) for x in f[2:]]
rounds = sorted({r for r, _ in rows})
AP, AD, T, D, FP, WP, FD, WD, MP, MD = range(10)

def med(values):
    return statistics.median(values)

print("| variant | attention ms, prefill | attention ms/step, decode | TTFT ms | decode ms/token |")
print("|---|---:|---:|---:|---:|")
for v in ("all-full", "mixed", "all-window", "all-skip"):
    col = lambda i: med([rows[(r, v)][i] for r in rounds])
    print(f"| {v} | {col(AP):.2f} | {col(AD):.4f} | {col(T):.1f} | {col(D):.3f} |")

def ratio_cell(per_round):
    return f"{med(per_round):.3f} ({min(per_round):.3f}-{max(per_round):.3f})"

def per_round(fn):
    return [fn({v: rows[(r, v)] for v in ("all-full", "mixed", "all-window", "all-skip")})
            for r in rounds]

print()
print(f"| window layer / full layer: median of {len(rounds)} rounds (range) | prefill | decode |")
print("|---|---:|---:|")
print("| attention kernel in the model (all-window / all-full) | %s | %s |" % (
    ratio_cell(per_round(lambda x: x["all-window"][AP] / x["all-full"][AP])),
    ratio_cell(per_round(lambda x: x["all-window"][AD] / x["all-full"][AD]))))
print("| the same, each process's attention over its own weight products' time | %s | %s |" % (
    ratio_cell(per_round(lambda x: (x["all-window"][AP] / x["all-window"][MP]) /
                                   (x["all-full"][AP] / x["all-full"][MP]))),
    ratio_cell(per_round(lambda x: (x["all-window"][AD] / x["all-window"][MD]) /
                                   (x["all-full"][AD] / x["all-full"][MD])))))
print("| attention kernel, mixed F W W F (its 2 window layers / its 2 full, one process) | %s | %s |" % (
    ratio_cell(per_round(lambda x: x["mixed"][WP] / x["mixed"][FP])),
    ratio_cell(per_round(lambda x: x["mixed"][WD] / x["mixed"][FD]))))
print("| whole layer, projections included ((W - K) / (F - K)) | %s | %s |" % (
    ratio_cell(per_round(lambda x: (x["all-window"][T] - x["all-skip"][T]) / (x["all-full"][T] - x["all-skip"][T]))),
    ratio_cell(per_round(lambda x: (x["all-window"][D] - x["all-skip"][D]) / (x["all-full"][D] - x["all-skip"][D])))))
PY
