#!/usr/bin/env bash
# What a sliding-window layer costs inside the whole model, against a full
# layer (issue 35, item 2): four variants of one 4-layer shape (d 512, f 1536,
# 8/2 heads x 64, vocab 4096, window 128): all-full F F F F, mixed F W W F,
# all-window W W W W and all-skip K K K K, at PROMPT tokens (default 2048).
#
#   bash bench/window_pricing.sh [PROMPT] [THREADS] [REPEATS]
#
# Two figures per variant, both from whole-model runs:
#  - attention: the model's own attention kernel time per prefill and per
#    decode step (hilnas::attention, and hilnas::attention_window for window
#    layers, in bench/step_profile, which times every
#    op of a real prefill and decode of the model); window / full is
#    all-window's over all-full's, the price of the window itself.
#  - layer: TTFT and decode ms/token of `hilnas run` (medians of REPEATS
#    processes, each after WARMUPS untimed ones, default 1, as
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
REPEATS="${3:-3}"
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

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; prompt $PROMPT, $THREADS thread(s), window 128"
echo
echo "| variant | attention ms, prefill | attention ms/step, decode | TTFT ms | decode ms/token |"
echo "|---|---:|---:|---:|---:|"
for v in all-full mixed all-window all-skip; do
  # step_profile prints the prefill table, then the decode table.
  "$P" --arch "$W/$v.textproto" --prompt "$PROMPT" --threads "$THREADS" --decode-tokens 64 \
      --repeats "$REPEATS" >"$W/$v.profile" 2>&1
  # Full layers' attention is hilnas::attention, window layers'
  # hilnas::attention_window (model/attention.h): per phase "full window",
  # then the layers' total per phase.
  read -r fp wp fd wd ap ad <<<"$(awk -F'|' '/^prefill:/{ph = 1} /^decode:/{ph = 2}
      /^\| hilnas::attention /{gsub(/ /, "", $4); f[ph] = $4}
      /^\| hilnas::attention_window /{gsub(/ /, "", $4); w[ph] = $4}
      END {printf "%s %s %s %s %s %s\n", f[1] + 0, w[1] + 0, f[2] + 0, w[2] + 0,
                  f[1] + w[1], f[2] + w[2]}' "$W/$v.profile")"
  for _ in $(seq "$REPEATS"); do
    "$B" run --ckpt "$W/$v" --prompt-tokens "$PROMPT" --max-new-tokens 65 --threads "$THREADS" \
        --warmups "${WARMUPS:-1}" 2>&1 |
      sed -n 's/^stats: //p' |
      /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["ttft_ms"], j["decode_ms_per_token"])'
  done >"$W/$v.run"
  t=$(cut -d' ' -f1 "$W/$v.run" | median)
  d=$(cut -d' ' -f2 "$W/$v.run" | median)
  printf '| %s | %.2f | %.4f | %.1f | %.3f |\n' "$v" "$ap" "$ad" "$t" "$d"
  echo "$v $ap $ad $t $d $fp $wp $fd $wd" >>"$W/all.txt"
done
echo
awk '{ap[$1] = $2; ad[$1] = $3; t[$1] = $4; d[$1] = $5; fp[$1] = $6; wp[$1] = $7; fd[$1] = $8; wd[$1] = $9}
  END {
    print "| window layer / full layer | prefill | decode |"
    print "|---|---:|---:|"
    printf "| attention kernel in the model (all-window / all-full) | %.3f | %.3f |\n",
      ap["all-window"] / ap["all-full"], ad["all-window"] / ad["all-full"]
    printf "| attention kernel, mixed F W W F (its 2 window layers / its 2 full, one process) | %.3f | %.3f |\n",
      wp["mixed"] / fp["mixed"], wd["mixed"] / fd["mixed"]
    printf "| whole layer, projections included ((W - K) / (F - K)) | %.3f | %.3f |\n",
      (t["all-window"] - t["all-skip"]) / (t["all-full"] - t["all-skip"]),
      (d["all-window"] - d["all-skip"]) / (d["all-full"] - d["all-skip"])
  }' "$W/all.txt"
