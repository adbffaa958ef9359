#!/usr/bin/env bash
# Does the runtime keep the right pool for a decode step's splits on this
# host (model/work_split.h, TuneThreadPool)? Paired rounds: each round runs
# full4 once with HILNAS_THREAD_POOL=openmp, once with =spin and once
# tuned (the variable unset: the process times both and keeps one), in an
# order that turns each round, and records decode ms/token (64 tokens after
# the prompt, one warm-up generation first, as runtime_compare.sh's rows).
# The tuned process's pick should decode about as fast as the faster named
# pool: the summary gives, per row, the medians and tuned / min(named).
# hilnas only; no llama.cpp.
#
#   bash bench/thread_pools.sh [PROMPTS] [PRECISIONS] [THREADS]
#     PROMPTS     comma list (default 256,2048)
#     PRECISIONS  comma list of f32, f16, q4_0, q8_0 (default f32,f16)
#     THREADS     comma list (default 2; the pools only differ from 2 up)
#   ROUNDS (default 3); KV_DTYPE (default f16); OMP_WAIT_POLICY passes
#   through (PASSIVE: libgomp's workers sleep after every region, so each
#   OpenMP split waits for a wake-up, the case the spin pool was written
#   for).
set -euo pipefail
cd "$(dirname "$0")/.."
PROMPTS="${1:-256,2048}"
PRECISIONS="${2:-f32,f16}"
THREADS="${3:-2}"
ROUNDS="${ROUNDS:-3}"
B="$PWD/build/tools/hilnas"
[ -x "$B" ] || { echo "build hilnas first (build/tools/hilnas)" >&2; exit 1; }
W="$(mktemp -d /tmp/hilnas-thread-pools.XXXXXX)"
trap 'rm -rf "$W"' EXIT
{
  echo 'name: "full4" num_layers: 4 d_model: 512 d_ffn: 1536 num_heads: 8'
  echo 'num_kv_heads: 2 head_dim: 64 vocab_size: 4096 tie_embeddings: true'
  echo 'rope_theta: 10000 norm_eps: 1e-05 qk_norm: true sliding_window: 128'
  for _ in 1 2 3 4; do echo 'attention: FULL'; done
} >"$W/full4.textproto"
IFS=, read -ra prompt_list <<<"$PROMPTS"
IFS=, read -ra precision_list <<<"$PRECISIONS"
IFS=, read -ra thread_list <<<"$THREADS"

run() {  # MODE PROMPT THREADS WEIGHTS: prints "decode_ms pick"
  local out pool=(-u HILNAS_THREAD_POOL)  # tuned: the variable unset
  [ "$1" = tuned ] || pool=(HILNAS_THREAD_POOL="$1")
  out=$(env "${pool[@]}" "$B" run --arch "$W/full4.textproto" --prompt-tokens "$2" \
    --max-new-tokens 65 --threads "$3" --weight-dtype "$4" --kv-dtype "${KV_DTYPE:-f16}" \
    --warmups 1 2>&1) || { echo "$out" >&2; exit 1; }
  echo "$out" | sed -n 's/^decode thread pool: //p' >>"$W/picks.txt"
  printf '%s %s\n' \
    "$(echo "$out" | sed -n 's/^stats: //p' |
      /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["decode_ms_per_token"])')" \
    "$(echo "$out" | sed -n 's/^decode thread pool: \([a-z]*\).*/\1/p')"
}

modes=(openmp spin tuned)
echo "| round | threads | weights | prompt | openmp ms/tok | spin ms/tok | tuned ms/tok | tuned kept |"
echo "|---:|---:|---|---:|---:|---:|---:|---|"
for r in $(seq "$ROUNDS"); do
  for t in "${thread_list[@]}"; do
    for pr in "${precision_list[@]}"; do
      for p in "${prompt_list[@]}"; do
        declare -A ms=()
        pick=?
        for k in 0 1 2; do  # the round's order turns: each mode goes first in turn
          m=${modes[$(((r + k) % 3))]}
          run "$m" "$p" "$t" "$pr" >"$W/one.txt"
          read -r d got <"$W/one.txt"
          ms[$m]=$d
          [ "$m" = tuned ] && pick=$got
        done
        printf '| %s | %s | %s | %s | %.3f | %.3f | %.3f | %s |\n' "$r" "$t" "$pr" "$p" \
          "${ms[openmp]}" "${ms[spin]}" "${ms[tuned]}" "$pick"
        echo "$t $pr $p ${ms[openmp]} ${ms[spin]} ${ms[tuned]} $pick" >>"$W/rows.txt"
      done
    done
  done
done
echo
echo "Medians of the rounds (tuned / faster named: 1.00 = the pick decodes as fast as the better pool):"
echo
echo "| threads | weights | prompt | openmp | spin | tuned | tuned / faster named | kept (rounds) |"
echo "|---:|---|---:|---:|---:|---:|---:|---|"
/usr/bin/python3 - "$W/rows.txt" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    t, pr, p, o, s, u, k = line.split()
    rows[(int(t), pr, int(p))].append((float(o), float(s), float(u), k))
for key in sorted(rows):
    v = rows[key]
    o, s, u = (statistics.median(x[i] for x in v) for i in range(3))
    kept = collections.Counter(x[3] for x in v)
    print(f"| {key[0]} | {key[1]} | {key[2]} | {o:.3f} | {s:.3f} | {u:.3f} | {u / min(o, s):.2f} | "
          + ", ".join(f"{n} {c}" for n, c in sorted(kept.items())) + " |")
EOF
echo
echo "The tuned processes' own timings (decode thread pool: ...):"
sed 's/^/  /' "$W/picks.txt" | grep -v HILNAS_THREAD_POOL || true
