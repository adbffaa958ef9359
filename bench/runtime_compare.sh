#!/usr/bin/env bash
# hilnas's built-in runtime against llama.cpp on the same weights (issue 22):
# random-weight checkpoints written by `hilnas checkpoint init`, converted by
# `hilnas export --format gguf`, timed by `hilnas run` and by llama.cpp's
# llama-bench, interleaved row by row in one session so drift hits both.
#
#   LLAMA_BENCH=/path/to/llama-bench bash bench/runtime_compare.sh [SHAPES] [PROMPTS] [THREADS] [PRECISIONS]
#     SHAPES   comma list of full4, big12, llama1b, mixed4 (default full4,mixed4)
#     PROMPTS  comma list of prompt lengths (default 256,1024,2048)
#     THREADS  comma list (default 1,2)
#     PRECISIONS  f32, f16, q4_0, q8_0 weights (default f32,f16): hilnas
#              stores the matrices as that (--weight-dtype; f16 computed in
#              f32, q4_0/q8_0 against q8_0 activations), llama.cpp runs the
#              GGUF of the same weights hilnas exports at that type (its
#              q4_0/q8_0 tensors are llama-quantize --pure's: quant_exact.sh)
#
# HILNAS_CPU_FEATURES=avx2 (util/cpu_features.h) runs hilnas as on an
# AVX2-only CPU; pair it with a llama-bench built the same way
# (-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
# -DGGML_AVX512=OFF) to compare the runtimes on that instruction set.
#
# Each hilnas process times its decode step on libgomp's workers and on
# its spin pool and keeps the faster (model/work_split.h); the table ends
# with the picks and both step times. HILNAS_THREAD_POOL=openmp|spin names
# the pool instead, for all of them.
#
# KV_DTYPE=f16 stores hilnas's KV cache in f16, as llama-bench's default
# cache is (default f32); KV_DTYPE=q8_0 stores both runtimes' caches as
# Q8_0 blocks (llama.cpp then needs flash attention, -fa 1).
#
# WARMUPS (default 1): untimed generations of the same lengths before each
# timed hilnas process's timed one (`hilnas run --warmups`), as llama-bench
# runs a warm-up prompt of the same length before its timed ones and the
# agents' protocol warms up too; WARMUPS=0 times each process's first,
# cold prompt (page faults, BLAS and OpenMP thread start-up), as tables
# before 2026-11-26's Xeon section did.
#
# TTFT is the prompt on an empty cache (llama-bench's pp test at depth 0);
# decode is ms/token of 64 tokens after the prompt (hilnas decodes after
# its prompt; llama-bench's tg test at depth = prompt, `-d`). No flash
# attention but for a q8_0 cache; llama.cpp's K/V cache is f16 (llama-bench
# offers no f32 cache) or q8_0, hilnas's as KV_DTYPE says. Each figure is the median of REPEATS runs
# (default 3). llama.cpp is not a dependency of hilnas: build it in your own
# session (../shared/MACHINE-NOTES.md) and record its commit.
#
# mixed4 has sliding-window and skip layers, which llama.cpp's llama layout
# cannot express: its rows are hilnas only, beside hilnas's all-full and
# all-but-attention variants of the same shape, to price a window layer's
# attention against a full layer's.
#
# PIN_CPUS (a taskset CPU list, e.g. 3 or 2,3): both runtimes' processes
# run on those CPUs only. On a VM whose vCPUs differ (a lent Xeon's read
# one thread's stream bandwidth from 9.9 to 26.2 GB/s by vCPU), unpinned
# one-thread rows compare where each process landed as much as the
# runtimes; bench/device_rerun.sh's `pinned` phase walks a few vCPUs.
#
# Prints a Markdown table (paste into bench/data/runtime-compare.md).
set -euo pipefail
cd "$(dirname "$0")/.."
SHAPES="${1:-full4,mixed4}"
PROMPTS="${2:-256,1024,2048}"
THREADS="${3:-1,2}"
PRECISIONS="${4:-f32,f16}"
REPEATS="${REPEATS:-3}"
B="$PWD/build/tools/hilnas"
PIN=()
[ -n "${PIN_CPUS:-}" ] && PIN=(taskset -c "$PIN_CPUS")
LB="${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
W="$(mktemp -d /tmp/hilnas-runtime-compare.XXXXXX)"
trap 'rm -rf "$W"' EXIT

arch() {  # NAME LAYERS D FFN HEADS KV VOCAB ATTENTION...
  local name=$1 layers=$2 d=$3 f=$4 heads=$5 kv=$6 vocab=$7
  shift 7
  {
    echo "name: \"$name\" num_layers: $layers d_model: $d d_ffn: $f num_heads: $heads"
    echo "num_kv_heads: $kv head_dim: 64 vocab_size: $vocab tie_embeddings: true"
    echo "rope_theta: 10000 norm_eps: 1e-05 qk_norm: true sliding_window: 128"
    for a in "$@"; do echo "attention: $a"; done
  } >"$W/$name.textproto"
}
F=FULL S=SLIDING_WINDOW K=SKIP
arch full4 4 512 1536 8 2 4096 $F $F $F $F
arch swa4 4 512 1536 8 2 4096 $F $S $S $F
arch skip4 4 512 1536 8 2 4096 $F $K $K $F
arch big12 12 1024 4096 32 8 202048 $F $F $F $F $F $F $F $F $F $F $F $F
# Llama 3.2 1B's shape (16 x d 2048, f 8192, 32/8 heads of 64, vocab 128256)
# in the qwen3 layout the others use; 1.2 B parameters, 5 GB at f32.
arch llama1b 16 2048 8192 32 8 128256 $F $F $F $F $F $F $F $F $F $F $F $F $F $F $F $F

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# hilnas: "ttft decode" medians over REPEATS processes.
hilnas_row() {  # CKPT PROMPT THREADS WEIGHTS
  local t d tt dd res huge
  : >"$W/h.txt"
  for _ in $(seq "$REPEATS"); do
    "${PIN[@]}" "$B" run --ckpt "$1" --prompt-tokens "$2" --max-new-tokens 65 --threads "$3" \
        --weight-dtype "$4" --kv-dtype "${KV_DTYPE:-f32}" --warmups "${WARMUPS:-1}" >"$W/run.txt" 2>&1
    read -r tt dd < <(sed -n 's/^stats: //p' "$W/run.txt" |
      /usr/bin/python3 -c 'import json,sys; j=json.load(sys.stdin); print(j["ttft_ms"], j["decode_ms_per_token"])')
    echo "$tt $dd" >>"$W/h.txt"
    # How much of the weights' mapping the kernel put on huge pages: a
    # one-thread GEMV read 4 KiB-paged weights at 25-27 GB/s against 36-45
    # on huge pages (Zen 4, bench/weight_pages).
    read -r res huge < <(sed -n 's/^pages: .* \([0-9.]*\) MiB resident, \([0-9.]*\) MiB of it.*/\1 \2/p' "$W/run.txt")
    echo "$(basename "$1") $4 $3 $2 $tt $dd ${res:-0} ${huge:-0}" >>"$W/pages.txt"
    # The decode kernel's form the process's tuner picked (model/gemv.h).
    echo "$(basename "$1") $4 $3 threads: $(sed -n 's/^decode GEMV form: \([a-z-]*\).*/\1/p' "$W/run.txt")" >>"$W/forms.txt"
    # The kernels it ran (and, under HILNAS_CPU_FEATURES, the cap).
    sed -n 's/^kernels: //p' "$W/run.txt" >>"$W/kernels.txt"
    # The pool its decode steps split on (model/work_split.h), with the
    # two step times behind the pick.
    echo "$(basename "$1") $4 $3 threads: $(sed -n 's/^decode thread pool: \([a-z]*\) (\(a decode step [0-9.]* ms on openmp, [0-9.]* on spin\|[^)]*\).*/\1 (\2)/p' "$W/run.txt")" >>"$W/pools.txt"
    # And who computed its prompt's products (model/prompt_gemm.h).
    echo "$(basename "$1") $4 $3 threads: $(sed -n 's/^prompt products: \([^(]*[^ (]\).*/\1/p' "$W/run.txt")" >>"$W/prompts.txt"
  done
  t=$(cut -d' ' -f1 "$W/h.txt" | median)
  d=$(cut -d' ' -f2 "$W/h.txt" | median)
  echo "$t $d"
}

# llama.cpp: pp at depth 0 and tg at depth PROMPT, averaged over REPEATS runs.
llama_row() {  # GGUF PROMPT THREADS
  # The same cache as hilnas's where llama.cpp has it: f16 (its default,
  # also for KV_DTYPE=f32, which llama-bench does not time) or q8_0, which
  # llama.cpp runs only with flash attention (its quantized V cache).
  local kv=f16 fa=0
  [ "${KV_DTYPE:-f32}" = q8_0 ] && kv=q8_0 fa=1
  "${PIN[@]}" "$LB" -m "$1" -p "$2" -n 64 -d "0,$2" -t "$3" -r "$REPEATS" -fa "$fa" -ctk "$kv" -ctv "$kv" \
      -o jsonl 2>/dev/null |
    /usr/bin/python3 -c '
import json, sys
p = int(sys.argv[1]); pp = tg = None
for line in sys.stdin:
    j = json.loads(line)
    if j["n_prompt"] == p and j["n_gen"] == 0 and j["n_depth"] == 0: pp = j["avg_ns"] / 1e6
    if j["n_prompt"] == 0 and j["n_gen"] > 0 and j["n_depth"] == p: tg = j["avg_ns"] / 1e6 / j["n_gen"]
print(pp, tg)' "$2"
}

echo "| shape | weights | threads | prompt | hilnas TTFT ms | llama.cpp TTFT ms | ratio | hilnas decode ms/tok | llama.cpp decode ms/tok | ratio |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
IFS=, read -ra shape_list <<<"$SHAPES"
IFS=, read -ra prompt_list <<<"$PROMPTS"
IFS=, read -ra thread_list <<<"$THREADS"
IFS=, read -ra precision_list <<<"$PRECISIONS"
for shape in "${shape_list[@]}"; do
  variants=("$shape")
  [ "$shape" = mixed4 ] && variants=(full4 swa4 skip4)
  for v in "${variants[@]}"; do
    [ -d "$W/$v" ] && continue
    "$B" checkpoint init --arch "$W/$v.textproto" --out "$W/$v" --seed 1 >/dev/null
    if [ "$v" = full4 ] || [ "$v" = big12 ] || [ "$v" = llama1b ]; then
      for pr in "${precision_list[@]}"; do
        "$B" export --format gguf --ckpt "$W/$v" --out "$W/$v.$pr.gguf" --dtype "$pr" >/dev/null
      done
    fi
  done
  precisions=("${precision_list[@]}")
  [ "$shape" = mixed4 ] && precisions=(f32)  # the window-cost rows
  for pr in "${precisions[@]}"; do
    for t in "${thread_list[@]}"; do
      for p in "${prompt_list[@]}"; do
        for v in "${variants[@]}"; do
          read -r ht hd <<<"$(hilnas_row "$W/$v" "$p" "$t" "$pr")"
          lt=- ld=- rt=- rd=-
          if [ -f "$W/$v.$pr.gguf" ]; then
            read -r lt ld <<<"$(llama_row "$W/$v.$pr.gguf" "$p" "$t")"
            rt=$(awk -v a="$ht" -v b="$lt" 'BEGIN {printf "%.2fx", a / b}')
            rd=$(awk -v a="$hd" -v b="$ld" 'BEGIN {printf "%.2fx", a / b}')
            lt=$(printf '%.1f' "$lt")
            ld=$(printf '%.3f' "$ld")
          fi
          printf '| %s | %s | %s | %s | %.1f | %s | %s | %.3f | %s | %s |\n' "$v" "$pr" "$t" "$p" "$ht" \
            "$lt" "$rt" "$hd" "$ld" "$rd"
          echo "$v $t $p $ht $hd" >>"$W/all.txt"
        done
      done
    done
  done
  if [ "$shape" = mixed4 ]; then
    # A window layer's attention against a full layer's: the two middle
    # layers' cost over the skip variant, per variant.
    echo
    echo "| threads | prompt | SWA attention / full attention, prefill | decode |"
    echo "|---:|---:|---:|---:|"
    for t in "${thread_list[@]}"; do
      for p in "${prompt_list[@]}"; do
        awk -v t="$t" -v p="$p" '$2 == t && $3 == p {ttft[$1] = $4; dec[$1] = $5}
          END {printf "| %s | %s | %.2f | %.2f |\n", t, p,
                 (ttft["swa4"] - ttft["skip4"]) / (ttft["full4"] - ttft["skip4"]),
                 (dec["swa4"] - dec["skip4"]) / (dec["full4"] - dec["skip4"])}' "$W/all.txt"
      done
    done
  fi
done
# Processes whose weights did not get huge pages (under 90% of their
# mapping): their decode rows are read with that in mind.
if [ -s "$W/pages.txt" ]; then
  echo
  awk '{n++; if ($8 >= 0.9 * $7 && $7 > 0) h++; else bad = bad sprintf("\n  %s %s %s threads, prompt %s: TTFT %.1f ms, decode %.2f ms/token, %.1f of %.1f MiB on huge pages", $1, $2, $3, $4, $5, $6, $8, $7)}
    END {printf "weights on huge pages (90%% of their mapping or more) in %d of %d hilnas processes%s\n", h, n, bad}' "$W/pages.txt"
  echo "decode GEMV forms the tuner picked (processes):"
  sort "$W/forms.txt" | uniq -c | sed 's/^/ /'
  echo "decode thread pools the tuner picked (processes; its step on each pool):"
  sort "$W/pools.txt" | sed 's/ (.*//' | uniq -c | sed 's/^/ /'
  sed 's/^/   /' "$W/pools.txt"
  echo "prompt products the tuner picked (processes):"
  sort "$W/prompts.txt" | uniq -c | sed 's/^/ /'
  echo "kernels (processes; hilnas run's kernels line):"
  sort "$W/kernels.txt" | uniq -c | sed 's/^/ /'
fi
