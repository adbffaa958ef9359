#!/usr/bin/env bash
# Latency data at deployment precision (issue 36, item 5): one coordinator,
# one libtorch agent on CPUs 0-1 with 2 threads, the same Sobol draws of
# configs/latency-space.textproto measured at Q4_0 (N archs x 2 passes,
# test-retest) and at f32 (N archs x 1 pass); then the GP's 10-fold CV at
# Q4_0 beside its test-retest ceiling, and Kendall's tau between the two
# precisions (bench/precision_tau.py). Run on an otherwise idle machine.
#
#   bash bench/precision_latency.sh [N] [OUT_DIR] [KV_DTYPE]
#     N         architectures (default 200)
#     OUT_DIR   where the CSVs, plots and report go (default build/precision-latency)
#     KV_DTYPE  the Q4_0 runs' KV cache: f32 (default) or q8_0
#
# AGENT_FLAGS adds flags to the agent, e.g. AGENT_FLAGS=--no-canary where
# the host's speed flips between states faster than the drift check can
# re-time its canary (bench/data/precision-latency.md says when that was).
set -euo pipefail
cd "$(dirname "$0")/.."
N="${1:-200}"
OUT="${2:-build/precision-latency}"
KV="${3:-f32}"
B="$PWD/build/tools/hilnas"
SPACE=configs/latency-space.textproto
mkdir -p "$OUT"
PORT=$((50000 + RANDOM % 10000))
W="$(mktemp -d /tmp/hilnas-precision-latency.XXXXXX)"
"$B" coordinator --listen "127.0.0.1:$PORT" --db "$W/lat.db" >"$W/coordinator.log" 2>&1 &
COORD=$!
sleep 2
"$B" agent --coordinator "127.0.0.1:$PORT" --name epyc-2t --threads 2 --cpu-set 0-1 \
    --cooldown-ms 50 ${AGENT_FLAGS:-} >"$W/agent.log" 2>&1 &
AGENT=$!
trap 'kill $AGENT $COORD 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT
collect() {  # PRECISION KV PASSES OUT
  "$B" latency collect --coordinator "127.0.0.1:$PORT" --space "$SPACE" --n "$N" --passes "$3" \
      --seed 7 --prompt-lengths 512 --decode-tokens 32 --repeats 3 --max-repeats 5 --threads 2 \
      --precision "$1" --kv-dtype "$2" --out "$4"
}
{
  lscpu | sed -n 's/^Model name: *//p' | sed 's/^/CPU: /'
  lscpu | sed -n 's/^Flags: *//p' | tr ' ' '\n' | grep -E '^(avx2|fma|f16c|avx512f|avx512_vnni|avx512_bf16)$' |
    tr '\n' ' ' | sed 's/^/flags: /; s/$/\n/'
  git rev-parse --short HEAD | sed 's/^/commit: /'
  echo "agent flags: --threads 2 --cpu-set 0-1 --cooldown-ms 50 ${AGENT_FLAGS:-}"
} >"$OUT/report.md"
start=$(date +%s)
collect q4_0 "$KV" 2 "$OUT/latency-q4_0.csv"
collect fp32 f32 1 "$OUT/latency-f32.csv"
echo "collected in $(( $(date +%s) - start )) s" >>"$OUT/report.md"
for metric in ttft decode; do
  echo >>"$OUT/report.md"
  echo "## Q4_0 $metric: 10-fold CV and test-retest" >>"$OUT/report.md"
  "$B" latency eval --space "$SPACE" --data "$OUT/latency-q4_0.csv" --metric "$metric" --folds 10 \
      --plot "$OUT/latency-q4_0-$metric-cv.svg" >>"$OUT/report.md" 2>&1
done
echo >>"$OUT/report.md"
echo "## f32 against Q4_0, same architectures" >>"$OUT/report.md"
python3 bench/precision_tau.py "$OUT/latency-f32.csv" "$OUT/latency-q4_0.csv" >>"$OUT/report.md"
grep -c "went back to the queue" "$W/agent.log" | sed 's/^/jobs re-queued for drift: /' >>"$OUT/report.md" || true
grep -c "discarded" "$W/agent.log" | sed 's/^/runs the quiet-machine gate retook: /' >>"$OUT/report.md" || true
cat "$OUT/report.md"
