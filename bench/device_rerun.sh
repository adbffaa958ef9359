#!/usr/bin/env bash
# Issue 35's measurements on a host whose CPU is another model, in one
# command, from the bundle bench/portable_bundle.sh writes (hilnas,
# step_profile and llama-bench with every library they load), for a lent
# machine without Debian 12's libraries. Run in a checkout of the bundle's
# commit; results go to $OUT (default /tmp/device-rerun).
#
#   bash bench/portable_bundle.sh /tmp/hilnas-portable /path/to/llama.cpp/build/bin
#   cp build/portable/hilnas-x86_64.tar.xz SOMEWHERE   # carried to the host
#   bash bench/device_rerun.sh SOMEWHERE/hilnas-x86_64.tar.xz [PHASE]
#     PHASE 1  lscpu, the bundle's check (held-out losses equal the build
#              machine's), f32/f16 at 1 and 2 threads, window pricing at 1
#              and 2 threads (about 5 minutes on a 2-core EPYC)
#     PHASE 2  f32/f16 at 4 threads, Q4_0/Q8_0 at 1 and 2 threads
#     all      both (the default)
#     forms    only the GEMV forms below, pinned vCPU by vCPU (needs no
#              llama-bench in the bundle; under a minute)
#     scaling  issue 35 item 3 in paired rounds: bench/thread_scaling.sh,
#              hilnas and llama.cpp on 1 then 2 threads back to back, f32
#              and f16 at 256 and 2048 tokens (ROUNDS, default 3; about 2.5
#              minutes on a 2-core EPYC at 3), to $OUT/scaling.md
#     price    window pricing in one process (hilnas agent --price-windows,
#              as a phone runs it) at 1 and 2 threads, 5 rounds each (about
#              a minute on a 2-core EPYC), to $OUT/price.md
#     avx2     an AVX2-only CPU's paths on this host (util/cpu_features.h):
#              f32/f16 at 1 and 2 threads with hilnas under
#              HILNAS_CPU_FEATURES=avx2 and the bundle's llama.cpp with its
#              AVX2 (haswell) CPU variant alone beside it, then window
#              pricing at 1 and 2 threads under the cap, to $OUT/avx2.md
#              (the bundle's llama.cpp must be a -DGGML_BACKEND_DL=ON
#              -DGGML_CPU_ALL_VARIANTS=ON build; about 3 minutes on a
#              2-core EPYC)
#     pools    which pool a decode step's splits run on (model/
#              work_split.h): bench/thread_pools.sh, full4 with
#              HILNAS_THREAD_POOL=openmp, =spin and tuned in turn, f32 and
#              f16 at 256 and 2048 tokens on 2 threads (and 4 where 4 CPUs
#              are free), then on 2 threads under OMP_WAIT_POLICY=PASSIVE;
#              the tuned pick against the faster named pool, to
#              $OUT/pools.md (no llama-bench needed; about 3.5 minutes on a
#              2-core EPYC at ROUNDS 3)
#     pinned   one-thread f32/f16 rows at 2048 tokens with both runtimes
#              pinned to one vCPU, for each of PIN_LIST's (default 0 5 10
#              15): the same vCPU under both, where unpinned rows compare
#              placements too (a third Xeon read hilnas's one-thread f32
#              decode 1.37-1.80x llama.cpp's unpinned, 0.88x on another);
#              then, on the same vCPUs, forms of the one-thread f32 GEMV
#              over full4's weights (`weight_pages --forms`: the runtime's
#              four forms, one row in AVX-512, a plain read, and the form
#              the runtime's tuner picks there), to $OUT/forms.md; the
#              compare rows' hilnas runs print their own pick ("decode
#              GEMV form: ...")
# REPEATS (default 3) runs per f32/f16 row. Each step's steal time (the
# host's, from /proc/stat) is printed and kept in $OUT/steal.txt.
#
# The bundle must be unpacked at the PREFIX it was written for (its
# binaries' ELF interpreter and RPATH point there): /tmp/hilnas-portable
# unless HILNAS_PORTABLE says otherwise. Do not set LD_LIBRARY_PATH: the
# host's own programs (python3, awk) keep the host's libraries.
set -u
cd "$(dirname "$0")/.."
BUNDLE="${1:?the bundle: build/portable/hilnas-x86_64.tar.xz from bench/portable_bundle.sh}"
PHASE="${2:-all}"
O="${OUT:-/tmp/device-rerun}"
P="${HILNAS_PORTABLE:-/tmp/hilnas-portable}"
mkdir -p "$O" "$P"
case "$PHASE" in 1 | 2 | all | pinned | forms | scaling | price | avx2 | pools) ;; *) echo "PHASE is 1, 2, all, pinned, forms, scaling, price, avx2 or pools, not $PHASE" >&2; exit 2 ;; esac
tar xJf "$BUNDLE" -C "$P" || { echo "cannot unpack $BUNDLE into $P" >&2; exit 1; }
[ -x /usr/bin/python3 ] || ln -s "$(command -v python3)" /usr/bin/python3
mkdir -p build/tools build/bench
# build/bench/NAME in a build tree is a link to hilnas-bench (bench/benches.h):
# replace the links, not what they point to.
rm -f build/tools/hilnas build/bench/step_profile build/bench/weight_pages
cp "$P/bin/hilnas" build/tools/ && cp "$P/bin/step_profile" "$P/bin/weight_pages" build/bench/
export LLAMA_BENCH="$P/llama/llama-bench"
[ -x "$LLAMA_BENCH" ] || [ "$PHASE" = forms ] || [ "$PHASE" = price ] || [ "$PHASE" = pools ] ||
  { echo "the bundle has no llama-bench (portable_bundle.sh's LLAMA_BIN)" >&2; exit 1; }

# The VM's steal time (time its vCPUs were ready to run but the host ran
# something else) over each step, from /proc/stat: a row taken while the
# host was busy shows it. (The Xeon's first run of 2026-11-27 read a
# 2-thread row slower than its 1-thread one, and every op of a step_profile
# there, element-wise ones included, scaled only 1.1-1.3x on 2 threads.)
# A VM without steal accounting (Firecracker here) always reads 0.
steal_ticks() { awk '/^cpu /{print $9}' /proc/stat; }
step() {  # NAME COMMAND...: runs it, then prints and keeps its steal time
  local name=$1 s0 t0
  shift
  s0=$(steal_ticks)
  t0=$(date +%s.%N)
  "$@"
  awk -v n="$name" -v s="$(($(steal_ticks) - s0))" -v hz="$(getconf CLK_TCK)" \
      -v t0="$t0" -v t1="$(date +%s.%N)" \
      'BEGIN {printf "steal during %s: %.2f s of vCPU time over %.0f s\n", n, s / hz, t1 - t0}' |
    tee -a "$O/steal.txt"
}
R="${REPEATS:-3}"

if [ "$PHASE" != 2 ]; then
  { lscpu; echo; uname -a; head -3 /proc/meminfo;
    echo "THP $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"; } >"$O/lscpu.txt" 2>&1
fi
if [ "$PHASE" = pinned ]; then
  pinned() {
    echo "| vCPU | shape | weights | threads | prompt | hilnas TTFT ms | llama.cpp TTFT ms | ratio | hilnas decode ms/tok | llama.cpp decode ms/tok | ratio |"
    echo "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    for cpu in ${PIN_LIST:-0 5 10 15}; do
      PIN_CPUS=$cpu KV_DTYPE=f16 REPEATS=$R bash bench/runtime_compare.sh full4 2048 1 f32,f16 2>&1 |
        sed -n "s/^| full4 /| vCPU $cpu | full4 /p"
    done | tee "$O/pinned.md"
  }
  step "one thread pinned, vCPU by vCPU" pinned
fi
if [ "$PHASE" = pinned ] || [ "$PHASE" = forms ]; then
  forms() {
    for cpu in ${PIN_LIST:-0 5 10 15}; do
      taskset -c "$cpu" build/bench/weight_pages --forms --passes 30
      echo
    done 2>&1 | tee "$O/forms.md"
  }
  step "GEMV forms pinned, vCPU by vCPU" forms
fi
if [ "$PHASE" = scaling ]; then
  scaling() { ROUNDS="${ROUNDS:-3}" KV_DTYPE=f16 bash bench/thread_scaling.sh 256,2048 f32,f16 1,2 2>&1 |
    tee "$O/scaling.md"; }
  step "thread scaling, paired rounds" scaling
fi
if [ "$PHASE" = price ]; then
  price() {
    for t in 1 2; do
      build/tools/hilnas agent --price-windows --threads "$t" --price-rounds 5 2>/dev/null
      echo
    done | tee "$O/price.md"
  }
  step "window pricing in one process" price
fi
if [ "$PHASE" = pools ]; then
  pools() {
    local threads=2
    [ "$(nproc)" -ge 4 ] && threads=2,4
    {
      ROUNDS="${ROUNDS:-3}" bash bench/thread_pools.sh 256,2048 f32,f16 "$threads"
      echo
      echo "Under OMP_WAIT_POLICY=PASSIVE:"
      echo
      OMP_WAIT_POLICY=PASSIVE ROUNDS=2 bash bench/thread_pools.sh 256,2048 f32,f16 2
    } 2>&1 | tee "$O/pools.md"
  }
  step "decode thread pools, named and tuned" pools
fi
if [ "$PHASE" = avx2 ]; then
  # llama.cpp's DL build loads the best-scoring libggml-cpu-*.so in its
  # executable's folder (or the working directory): a copy of llama-bench
  # beside the haswell variant alone runs AVX2 + FMA + F16C kernels, as on
  # an AVX2-only CPU (its other libraries come through its RPATH).
  L2="$O/llama-avx2"
  [ -f "$P/llama/libggml-cpu-haswell.so" ] || {
    echo "the bundle's llama.cpp has no libggml-cpu-haswell.so: build it with -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON" >&2
    exit 1
  }
  rm -rf "$L2" && mkdir -p "$L2" && cp "$LLAMA_BENCH" "$P/llama/libggml-cpu-haswell.so" "$L2/"
  avx2() {
    {
      echo "llama.cpp: $("$L2/llama-bench" --list-devices 2>&1 | grep -m1 -i 'loaded CPU backend')"
      HILNAS_CPU_FEATURES=avx2 LLAMA_BENCH="$L2/llama-bench" KV_DTYPE=f16 REPEATS=$R \
        bash bench/runtime_compare.sh full4 256,2048 1,2 f32,f16 2>&1 | grep -v placeholder
      echo
      for t in 1 2; do
        HILNAS_CPU_FEATURES=avx2 build/tools/hilnas agent --price-windows --threads "$t" \
          --price-rounds 5 2>/dev/null
        echo
      done
    } | tee "$O/avx2.md"
  }
  step "AVX2 paths on both sides" avx2
fi
if [ "$PHASE" = 1 ] || [ "$PHASE" = all ]; then
  "$P/check.sh" 2>&1 | tee "$O/check.txt" || { echo "the bundle's outputs differ: not the same program" >&2; exit 1; }
  build/tools/hilnas run --arch configs/tiny-arch.textproto --prompt-tokens 32 --max-new-tokens 2 \
      --threads 1 2>&1 | grep kernels | tee "$O/kernels.txt"
  compare() { KV_DTYPE=f16 REPEATS=$R bash bench/runtime_compare.sh full4 256,2048 1,2 f32,f16 2>&1 |
    grep -v placeholder | tee "$O/compare.md"; }
  step "f32/f16 at 1 and 2 threads" compare
  window() { bash bench/window_pricing.sh 2048 "$1" 5 2>&1 | tee -a "$O/window.md"; }
  : >"$O/window.md"
  step "window pricing, 1 thread" window 1
  step "window pricing, 2 threads" window 2
fi
if [ "$PHASE" = 2 ] || [ "$PHASE" = all ]; then
  compare4() { KV_DTYPE=f16 REPEATS=$R bash bench/runtime_compare.sh full4 256,2048 4 f32,f16 2>&1 |
    grep -v placeholder | tee "$O/compare4.md"; }
  quant() { KV_DTYPE=f16 REPEATS=2 bash bench/runtime_compare.sh full4 512,2048 1,2 q4_0,q8_0 2>&1 |
    grep -v placeholder | tee "$O/quant.md"; }
  step "f32/f16 at 4 threads" compare4
  step "Q4_0/Q8_0 at 1 and 2 threads" quant
fi
echo "finished phase $PHASE" | tee "$O/finished.txt"
