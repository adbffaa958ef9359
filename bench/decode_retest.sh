#!/usr/bin/env bash
# Decode test-retest across fresh processes (issue 33): the same candidate
# (4 full layers, d_model 256, a 1024-token prompt, 32 decode tokens, one
# thread on CPU 0) measured by PROCS fresh processes in a row, each timing
# it as an agent does (build_dir/bench/decode_retest: warm-up, 5 runs,
# medians). Prints each process's medians and the spread (max/min) of TTFT
# and decode over the processes. Then the same within one process (JOBS
# jobs, each building its model afresh as an agent's jobs do).
#
#   bash bench/decode_retest.sh [PROCS (20)] [JOBS (10)]
#   BUILD=build EXTRA="--threads 2" bash bench/decode_retest.sh
set -euo pipefail
cd "$(dirname "$0")/.."
procs="${1:-20}"
jobs="${2:-10}"
bin="${BUILD:-build}/bench/decode_retest"
cpus="${CPUS:-0}"
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"
out="$(mktemp)"
for i in $(seq "$procs"); do
  taskset -c "$cpus" "$bin" --jobs 1 ${EXTRA:-} | sed "s/^job 0/process $i/" | tee -a "$out"
done
python3 - "$out" <<'PY'
import re, sys
rows = [l for l in open(sys.argv[1]) if l.startswith("process")]
t = [float(re.search(r"TTFT ([0-9.]+)", l).group(1)) for l in rows]
d = [float(re.search(r"decode ([0-9.]+)", l).group(1)) for l in rows]
print(f"across {len(rows)} fresh processes: spread (max/min) TTFT {max(t)/min(t):.3f}, "
      f"decode {max(d)/min(d):.3f} (decode min {min(d):.4f}, median {sorted(d)[len(d)//2]:.4f}, "
      f"max {max(d):.4f} ms/token)")
PY
rm -f "$out"
if [ "$jobs" -gt 1 ]; then
  echo "within one process, $jobs jobs:"
  taskset -c "$cpus" "$bin" --jobs "$jobs" ${EXTRA:-}
fi
