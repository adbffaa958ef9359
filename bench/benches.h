// The benchmarks that link libtorch, built as one program, hilnas-bench.
//
// Each was an executable of its own, and each paid the libtorch header's
// fixed cost (GCC loading the PCH and instantiating its pending templates,
// 13-15 s a file) for 1-18 s of its own code: 13 files, 290 s of a cold
// build's compiling. As one executable they compile in two unity batches.
// Each file keeps its `main` as NAME_main::Main; build/bench/NAME is a
// symbolic link to hilnas-bench, which runs the program its argv[0] names
// (so every command, script and document keeps `build/bench/NAME`, and a
// program that re-executes itself through /proc/self/exe with its argv
// comes back to itself). `hilnas-bench NAME ARGS...` does the same.
#ifndef HILNAS_BENCH_BENCHES_H_
#define HILNAS_BENCH_BENCHES_H_

// HILNAS_BENCHES(X): X(NAME) for each program, from bench/CMakeLists.txt's
// HILNAS_TORCH_BENCHES (the files it compiles into hilnas-bench).
#include "bench_list.h"

#define HILNAS_DECLARE_BENCH(NAME)   \
  namespace NAME##_main {            \
    int Main(int argc, char** argv); \
  }
HILNAS_BENCHES(HILNAS_DECLARE_BENCH)
#undef HILNAS_DECLARE_BENCH

#endif  // HILNAS_BENCH_BENCHES_H_
