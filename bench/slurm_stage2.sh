#!/usr/bin/env bash
# Stage 2's wall time on the same trials: the in-process trainer one trial at
# a time (max_in_flight 1) against the Slurm evaluator with two in flight, on
# the single-node Slurm of scripts/slurm-cluster (this machine's CPUs). Both
# campaigns use strategy "sobol" with the same seed, so they propose the same
# architectures whatever order trials finish in; the script checks that.
#
#   bash bench/slurm_stage2.sh [TRIALS] [STEPS]     (defaults 8 and 40)
#   IN_PROCESS_THREADS=1 bash bench/slurm_stage2.sh  the in-process trainer on
#       one core (OMP_NUM_THREADS of the coordinator), as each Slurm job has
#
# Prints a Markdown table (paste into bench/data/slurm-stage2.md).
set -euo pipefail
cd "$(dirname "$0")/.."
TRIALS="${1:-8}"
STEPS="${2:-40}"
B="$PWD/build/tools/hilnas"
W="$(mktemp -d /tmp/hilnas-slurm-bench.XXXXXX)"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  bash scripts/slurm-cluster stop "$W/slurm" >/dev/null 2>&1 || true
  rm -rf "$W"
}
trap cleanup EXIT

bash scripts/slurm-cluster start "$W/slurm" >/dev/null
"$B" corpus --sources /usr/share/common-licenses --out "$W/tokens.bin" >/dev/null
mkdir -p "$W/shared"
cat >"$W/slurm.textproto" <<EOT
shared_dir: "$W/shared"
slurm_conf: "$W/slurm/slurm.conf"
cpus_per_task: 1
time_limit_minutes: 30
poll_seconds: 0.5
max_poll_seconds: 2
script: "$B train --ckpt {checkpoint} --tokens $W/tokens.bin --out {workdir}/trained --overwrite --steps $STEPS --batch_size 4 --seq_len 64 --threads 1 --seed 5 --result_json {output}"
EOT
campaign() {  # NAME EVALUATOR MAX_IN_FLIGHT
  cat <<EOT
name: "$1"
backbone_checkpoint: "$PWD/data/demo-backbone"
tokens: "$W/tokens.bin"
quality_evaluator: "$2"
max_in_flight: $3
strategy: "sobol"
search_space {
  base { num_heads: 8 num_kv_heads: 2 head_dim: 32 vocab_size: 256 tie_embeddings: true
         rope_theta: 10000 norm_eps: 1e-05 sliding_window: 32 }
  num_layers { min: 2 max: 8 step: 1 }
  d_ffn { min: 128 max: 768 step: 64 }
  d_model { min: 128 max: 256 step: 64 }
  attention_choices: FULL attention_choices: SLIDING_WINDOW attention_choices: SKIP
  block_size: 64 max_consecutive_efficient: 2
}
ttft_prompt_tokens: 32
reference { loss: 6.0 }
stage1_latency_points: 4 stage1_sobol_points: 4 stage1_target_r2: 0.0
stage2_trials: $TRIALS batch_size: 2 seed: 5 candidates: 40
benchmark { warmup_runs: 0 repeats: 1 max_repeats: 1 decode_tokens: 2 threads: 1 }
train { steps: $STEPS batch_size: 4 seq_len: 64 eval_windows: 8 }
EOT
}
campaign seq in-process 1 >"$W/seq.textproto"
campaign slurm gpu 2 >"$W/slurm-c.textproto"

THREADS="${IN_PROCESS_THREADS:-$(nproc)}"
OMP_NUM_THREADS="$THREADS" "$B" coordinator --listen 127.0.0.1:0 --port_file "$W/port" --db "$W/c.db" \
  --work_dir "$W/work" --evaluator "gpu=slurm:$W/slurm.textproto" >"$W/coordinator.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$W/port" ] && break; sleep 0.1; done
ADDR="127.0.0.1:$(cat "$W/port")"
"$B" agent --coordinator "$ADDR" --name a1 --threads 1 --cooldown_ms 0 --max_foreign_cores 0 --canary=false >"$W/agent.log" 2>&1 &
PIDS+=($!)

stage2_seconds() {  # from "stage 2: N trials" to "done:" in the campaign's log
  sqlite3 "$W/c.db" "select (max(case when text like 'done:%' then ms end) -
                             min(case when text like 'stage 2: %trials in batches%' then ms end)) / 1000.0
                     from campaign_log where campaign = '$1'"
}
for name in seq slurm; do
  conf="$W/$name.textproto"
  [ "$name" = slurm ] && conf="$W/slurm-c.textproto"
  "$B" campaign create --coordinator "$ADDR" --config "$conf" >/dev/null
  "$B" campaign start "$name" --coordinator "$ADDR" --wait >/dev/null
done
SEQ=$(stage2_seconds seq)
SLURM=$(stage2_seconds slurm)
same=$(sqlite3 "$W/c.db" "select count(*) from (select arch_key from trials where campaign='seq' and stage=2
                           intersect select arch_key from trials where campaign='slurm' and stage=2)")
loss() { sqlite3 "$W/c.db" "select count(*) from trials where campaign='$1' and stage=2 and state=5"; }
echo "| evaluator | in flight | stage-2 trials done | stage-2 wall time s | ratio to in-process |"
echo "|---|---:|---:|---:|---:|"
printf '| in-process (%s threads) | 1 | %s | %.1f | 1.00 |\n' "$THREADS" "$(loss seq)" "$SEQ"
printf '| Slurm (1 CPU per job) | 2 | %s | %.1f | %.2f |\n' "$(loss slurm)" "$SLURM" \
  "$(echo "$SEQ / $SLURM" | bc -l)"
echo
echo "Same architectures in both: $same of $TRIALS; $STEPS training steps per trial."
