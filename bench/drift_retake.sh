#!/usr/bin/env bash
# The drift check against a real CPU hog, as figures (issue 33): what
# tests/canary_test used to assert, measured here instead. A coordinator and
# one agent (real libtorch runtime, pinned to CPU 0, one thread, quiet gate
# off so only the canary can see the hog, canary before every job). Each
# round:
#   1. a hog spins on CPU 0 for HOG_S seconds while a job is submitted: its
#      canary reads slow, the job goes back to the queue, the agent rests
#      (--drift_cooldown_ms) and retakes it once the hog is gone;
#   2. the same job again, on a quiet machine.
# Prints each round's retaken/quiet ratios of the TTFT and decode medians,
# whether the retaken job was re-queued and its canary's ratios, then the
# median and spread (min..max) of the ratios over the rounds.
#
#   bash bench/drift_retake.sh [ROUNDS (10)]
#   HILNAS=build/tools/hilnas HOG_S=4 bash bench/drift_retake.sh 10
#
# Needs a quiet machine apart from its own hog; results in bench/data/drift.md.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds="${1:-10}"
hilnas="${HILNAS:-build/tools/hilnas}"
hog_s="${HOG_S:-4}"
work="$(mktemp -d /tmp/hilnas-drift-XXXXXX)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

cat > "$work/arch.textproto" <<'EOF'
name: "drift" num_layers: 4 d_model: 256 d_ffn: 768 num_heads: 4 num_kv_heads: 2 head_dim: 64
vocab_size: 4096 tie_embeddings: true rope_theta: 10000 norm_eps: 1e-05
attention: FULL attention: FULL attention: FULL attention: FULL
EOF

"$hilnas" coordinator --listen=127.0.0.1:0 --db="$work/c.db" --port_file="$work/port" \
  --canary_tolerance=0.10 --max_drift_requeues=4 > "$work/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$work/port" ] && break; sleep 0.1; done
addr="127.0.0.1:$(cat "$work/port")"
"$hilnas" agent --coordinator="$addr" --name=pinned --cpu_set=0 --threads=1 --cooldown_ms=20 \
  --max_foreign_cores=0 --canary_every_jobs=1 --drift_cooldown_ms=$((hog_s * 1000)) \
  > "$work/agent.log" 2>&1 &
pids+=($!)

job() {  # job OUT: one benchmark of the candidate, its result as JSON
  "$hilnas" bench --coordinator="$addr" --arch "$work/arch.textproto" --prompt-lengths 1024 \
    --decode-tokens 16 --repeats 5 --max-repeats 5 --threads 1 --json > "$1" 2> "$1.log"
}

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
job "$work/warm.json"  # the first canary sets the baseline
for i in $(seq "$rounds"); do
  taskset -c 0 timeout "$hog_s" sh -c 'while :; do :; done' &
  job "$work/retaken-$i.json"
  wait $! 2>/dev/null || true
  job "$work/quiet-$i.json"
done

python3 - "$work" "$rounds" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def load(name):
    r = json.load(open(f"{work}/{name}.json"))
    s = r["summaries"][0]
    return s["ttftMedianMs"], s["decodeMedianMsPerToken"], r.get("canary", {})
tt, dd = [], []
print("| round | retaken TTFT / quiet | retaken decode / quiet | re-queues | retake's canary TTFT, decode |")
print("|---:|---:|---:|---:|---|")
for i in range(1, rounds + 1):
    rt, rd, c = load(f"retaken-{i}")
    qt, qd, _ = load(f"quiet-{i}")
    tt.append(rt / qt); dd.append(rd / qd)
    print(f"| {i} | {rt / qt:.3f} | {rd / qd:.3f} | {c.get('requeues', 0)} | "
          f"{c.get('ttftRatio', 0):.3f}x, {c.get('decodeRatio', 0):.3f}x |")
for name, v in [("TTFT", tt), ("decode", dd)]:
    print(f"{name}: median {statistics.median(v):.3f}, min {min(v):.3f}, max {max(v):.3f} over {len(v)} rounds")
EOF
