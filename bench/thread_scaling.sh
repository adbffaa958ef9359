#!/usr/bin/env bash
# Issue 35 item 3 as one command: does hilnas's runtime gain as much from a
# second thread (or a fourth) as llama.cpp's does on the same machine?
# Paired rounds: each round times hilnas on T1 then T2 threads and llama.cpp
# on T1 then T2 threads, back to back, through bench/runtime_compare.sh with
# REPEATS=1 (one warmed-up process a row), so a scaling figure compares two
# processes minutes apart at most, not two rows of a table taken a quarter of
# an hour apart (on a lent Xeon one process's one-thread time moved 1.3x from
# round to round, more than the two runtimes' scaling differed).
#
#   LLAMA_BENCH=/path/to/llama-bench bash bench/thread_scaling.sh [PROMPTS] [PRECISIONS] [THREADS]
#     PROMPTS     comma list (default 256,2048)
#     PRECISIONS  comma list of f32, f16, q4_0, q8_0 (default f32,f16)
#     THREADS     T1,T2 (default 1,2; 1,4 where four cores are free)
#   ROUNDS (default 5) paired rounds; KV_DTYPE (default f16, llama-bench's
#   cache) and PIN_CPUS as for runtime_compare.sh.
#
# Prints each round's row (ms at T1 / T2 and the quotient, prefill = TTFT of
# the prompt, decode = ms/token of 64 tokens after it), then the medians of
# the rounds' quotients and their ratio hilnas / llama.cpp (>= 1: hilnas
# scales at least as well), the same round by round, and the same from
# each runtime's fastest round at each thread count.
set -euo pipefail
cd "$(dirname "$0")/.."
PROMPTS="${1:-256,2048}"
PRECISIONS="${2:-f32,f16}"
THREADS="${3:-1,2}"
ROUNDS="${ROUNDS:-5}"
: "${LLAMA_BENCH:?set LLAMA_BENCH to a llama-bench binary}"
IFS=, read -r T1 T2 <<<"$THREADS"
[ -n "$T1" ] && [ -n "${T2:-}" ] || { echo "THREADS is two counts, e.g. 1,2, not $THREADS" >&2; exit 2; }
W="$(mktemp -d /tmp/hilnas-thread-scaling.XXXXXX)"
trap 'rm -rf "$W"' EXIT
IFS=, read -ra prompt_list <<<"$PROMPTS"
IFS=, read -ra precision_list <<<"$PRECISIONS"

echo "| round | weights | prompt | hilnas prefill ms $T1 / $T2 | x | llama.cpp prefill ms $T1 / $T2 | x | hilnas decode ms/tok $T1 / $T2 | x | llama.cpp decode ms/tok $T1 / $T2 | x | hilnas prompt products $T1 / $T2 |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
# Who computed a hilnas process's prompt products (its tuner's pick, model/
# prompt_gemm.h; one process per thread count a round): "own" or "OpenBLAS".
pick() {  # PRECISION THREADS
  local k
  k=$(sed -n "/^prompt products the tuner picked/,\$ s/^ *[0-9]* full4 $1 $2 threads: //p" "$W/round.md" |
    head -1 | sed -e "s/^hilnas's .*/own/" -e 's/^OpenBLAS.*/OpenBLAS/')
  echo "${k:-?}"
}
for r in $(seq "$ROUNDS"); do
  for pr in "${precision_list[@]}"; do
    for p in "${prompt_list[@]}"; do
      # runtime_compare's row: | full4 | pr | threads | prompt | hTTFT | lTTFT | x | hdec | ldec | x |
      KV_DTYPE="${KV_DTYPE:-f16}" REPEATS=1 bash bench/runtime_compare.sh full4 "$p" "$T1,$T2" "$pr" \
        >"$W/round.md" 2>&1 || { cat "$W/round.md" >&2; exit 1; }
      awk -F'|' -v r="$r" -v pr="$pr" -v p="$p" -v t1="$T1" -v t2="$T2" \
        -v k1="$(pick "$pr" "$T1")" -v k2="$(pick "$pr" "$T2")" '
        function s(x) { gsub(/ /, "", x); return x }
        $2 ~ /full4/ && s($3) == pr && s($5) == p { ht[s($4)] = s($6); lt[s($4)] = s($7); hd[s($4)] = s($9); ld[s($4)] = s($10) }
        END {
          if (!(t1 in ht) || !(t2 in ht)) { print "no rows for " pr " " p > "/dev/stderr"; exit 1 }
          printf "| %s | %s | %s | %.1f / %.1f | %.2f | %.1f / %.1f | %.2f | %.3f / %.3f | %.2f | %.3f / %.3f | %.2f | %s / %s |\n",
            r, pr, p, ht[t1], ht[t2], ht[t1] / ht[t2], lt[t1], lt[t2], lt[t1] / lt[t2],
            hd[t1], hd[t2], hd[t1] / hd[t2], ld[t1], ld[t2], ld[t1] / ld[t2], k1, k2
          print pr, p, ht[t1] / ht[t2], lt[t1] / lt[t2], hd[t1] / hd[t2], ld[t1] / ld[t2],
            ht[t1], ht[t2], lt[t1], lt[t2], hd[t1], hd[t2], ld[t1], ld[t2] >> "'"$W/x.txt"'"
        }' "$W/round.md"
    done
  done
done

# The median of a[1..n], sorting a in place (a[1] and a[n] are then the
# range); both summary tables below use it.
MEDIAN_AWK='
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }'
echo
echo "| weights | prompt | prefill x: hilnas | llama.cpp | hilnas / llama.cpp | decode x: hilnas | llama.cpp | hilnas / llama.cpp |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for pr in "${precision_list[@]}"; do
  for p in "${prompt_list[@]}"; do
    awk -v pr="$pr" -v p="$p" "$MEDIAN_AWK"'
      $1 == pr && $2 == p { n++; a[n] = $3; b[n] = $4; c[n] = $5; d[n] = $6 }
      END {
        ha = median(a, n); la = median(b, n); hd = median(c, n); ld = median(d, n)
        printf "| %s | %s | %.2f | %.2f | **%.2f** | %.2f | %.2f | **%.2f** |\n", pr, p, ha, la, ha / la, hd, ld, hd / ld
      }' "$W/x.txt"
  done
done
echo
echo "medians of $ROUNDS paired rounds; x = ms at $T1 threads / ms at $T2; the ratio columns >= 1 where hilnas gains at least as much"
# The same question round by round: a round's two runtimes ran minutes apart
# at most, so its quotient (hilnas's x / llama.cpp's x) shares that round's
# host state, which the medians above, taken column by column, do not pair.
# Its median and range across rounds, and how many rounds read >= 1: a gap
# that half the rounds contradict is the host's, not the runtime's.
echo
echo "| weights | prompt | prefill, round by round: hilnas x / llama.cpp x, median (range) | rounds >= 1 | decode, round by round: median (range) | rounds >= 1 |"
echo "|---|---:|---:|---:|---:|---:|"
for pr in "${precision_list[@]}"; do
  for p in "${prompt_list[@]}"; do
    awk -v pr="$pr" -v p="$p" "$MEDIAN_AWK"'
      $1 == pr && $2 == p { n++; f[n] = $3 / $4; g[n] = $5 / $6; fa += f[n] >= 1; ga += g[n] >= 1 }
      END {
        fm = median(f, n); gm = median(g, n)  # sorted in place: f[1], f[n] are the range
        printf "| %s | %s | **%.2f** (%.2f-%.2f) | %d of %d | **%.2f** (%.2f-%.2f) | %d of %d |\n", pr, p, fm, f[1], f[n], fa, n, gm, g[1], g[n], ga, n
      }' "$W/x.txt"
  done
done
# And from each runtime's fastest round at each thread count: a shared
# host's noise only adds time (a vCPU whose host core is busy, a
# neighbour's memory traffic), so the minimum of a column is the nearest
# to a quiet host's figure, and min(T1) / min(T2) the scaling that host
# would show, whichever rounds the minima came from.
echo
echo "| weights | prompt | prefill x from the fastest rounds: hilnas | llama.cpp | hilnas / llama.cpp | decode x: hilnas | llama.cpp | hilnas / llama.cpp |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for pr in "${precision_list[@]}"; do
  for p in "${prompt_list[@]}"; do
    awk -v pr="$pr" -v p="$p" '
      function lo(i, v) { if (!(i in m) || v < m[i]) m[i] = v }
      $1 == pr && $2 == p { for (i = 7; i <= 14; i++) lo(i, $i) }
      END {
        hp = m[7] / m[8]; lp = m[9] / m[10]; hd = m[11] / m[12]; ld = m[13] / m[14]
        printf "| %s | %s | %.2f | %.2f | **%.2f** | %.2f | %.2f | **%.2f** |\n", pr, p, hp, lp, hp / lp, hd, ld, hd / ld
      }' "$W/x.txt"
  done
done
