#!/usr/bin/env bash
# A bundle of hilnas for an x86-64 host without Debian 12's libraries: the
# runtime timed on another machine's CPU (issue 35), next to llama.cpp.
#
#   bash bench/portable_bundle.sh [PREFIX] [LLAMA_BIN]
#     PREFIX     where the bundle will be unpacked on the other host
#                (default /tmp/hilnas-portable): the binaries' ELF
#                interpreter is PREFIX/lib/ld-linux-x86-64.so.2 and their
#                RPATH (which, unlike RUNPATH, also serves their libraries'
#                dependencies) PREFIX/lib, so they re-execute themselves
#                (/proc/self/exe) as on this machine and the host's own
#                programs keep the host's glibc (no LD_LIBRARY_PATH)
#     LLAMA_BIN  a llama.cpp bin folder to pack beside (llama-bench and its
#                libraries); build it with -DGGML_NATIVE=OFF
#                -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON so that it
#                picks its kernels from the host's CPU, as hilnas does
#
# Writes build/portable/hilnas-x86_64.tar.xz. On the other host:
#   mkdir -p PREFIX && tar xJf hilnas-x86_64.tar.xz -C PREFIX
#   PREFIX/check.sh       # in the checkout: the bundle's outputs against this machine's
#   mkdir -p build/tools build/bench && cp PREFIX/bin/hilnas build/tools/ &&
#     rm -f build/bench/step_profile && cp PREFIX/bin/step_profile build/bench/
#   (in a build tree build/bench/step_profile is a link to hilnas-bench:
#   bench/device_rerun.sh does all this)
#   LLAMA_BENCH=PREFIX/llama/llama-bench bash bench/runtime_compare.sh ...
# The binaries carry glibc and every library they load (the dynamic loader
# included), stubs for the ones never called (bench/portable_bundle.py).
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX="${1:-/tmp/hilnas-portable}"
LLAMA_BIN="${2:-}"
B=build/portable
if ! command -v patchelf >/dev/null; then  # Debian's, to set the interpreter and RPATH
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get install -y -qq --no-install-recommends patchelf >/dev/null ||
    { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq --no-install-recommends patchelf >/dev/null; }
fi
rm -rf "$B/root" && mkdir -p "$B/root/bin"
BINS="build/tools/hilnas build/bench/step_profile build/bench/gemm_threads build/bench/core_ceiling
  build/bench/weight_pages"
cp $BINS "$B/root/bin/"
/usr/bin/python3 bench/portable_bundle.py "$B/root" "$B"/root/bin/*
for b in "$B"/root/bin/*; do
  patchelf --set-interpreter "$PREFIX/lib/ld-linux-x86-64.so.2" --force-rpath --set-rpath "$PREFIX/lib" "$b"
done
if [ -n "$LLAMA_BIN" ]; then
  mkdir -p "$B/root/llama"
  cp -a "$LLAMA_BIN"/llama-bench "$LLAMA_BIN"/*.so* "$B/root/llama/"
  patchelf --set-interpreter "$PREFIX/lib/ld-linux-x86-64.so.2" --force-rpath \
    --set-rpath "$PREFIX/llama:$PREFIX/lib" \
    "$B/root/llama/llama-bench"
  for l in "$B"/root/llama/*.so*; do  # their RUNPATH (the build folder) hides the RPATH
    [ -L "$l" ] || patchelf --set-rpath "$PREFIX/llama:$PREFIX/lib" "$l"
  done
fi
# The check the other host runs first, in a checkout of the same commit: the
# demo backbone's held-out loss on 64 windows of this machine's corpus,
# written here by the system build and there by the bundle, at f32 and
# Q4_0 weights; more than 1e-5 nats apart and it is not the same program.
mkdir -p "$B/root/check"
build/tools/hilnas corpus --out "$B/root/check/corpus.bin" >/dev/null
for d in f32 q4_0; do
  echo "$d $(build/tools/hilnas eval --ckpt data/demo-backbone --tokens "$B/root/check/corpus.bin" \
      --windows 64 --weight-dtype $d 2>&1 | sed -n 's/.*held-out loss \([0-9.]*\).*/\1/p')"
done >"$B/root/check/expected.txt"
cat >"$B/root/check.sh" <<CHECK
#!/usr/bin/env bash
# The bundle's held-out losses against the ones the build machine wrote;
# differences past 1e-5 nats fail.
set -eu
while read -r d want; do
  got=\$("$PREFIX/bin/hilnas" eval --ckpt "\${1:-data/demo-backbone}" --tokens "$PREFIX/check/corpus.bin" \\
      --windows 64 --weight-dtype \$d 2>&1 | sed -n 's/.*held-out loss \\([0-9.]*\\).*/\\1/p')
  echo "\$d: bundle \$got, build machine \$want"
  awk -v a="\$got" -v b="\$want" 'BEGIN {d = a - b; exit !(a != "" && d < 1e-5 && d > -1e-5)}'
done <"$PREFIX/check/expected.txt"
CHECK
chmod +x "$B/root/check.sh"
tar cf - -C "$B/root" . | xz -9 -T2 >"$B/hilnas-x86_64.tar.xz"
ls -la "$B/hilnas-x86_64.tar.xz"
