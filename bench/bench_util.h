// Small helpers the benchmarks share: flag lookup, medians and dying on a
// status.
#ifndef HILNAS_BENCH_BENCH_UTIL_H_
#define HILNAS_BENCH_BENCH_UTIL_H_

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace hilnas::bench {

// The value after `name` on the command line, else `fallback`.
inline std::string Arg(int argc, char** argv, const char* name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], name)) return argv[i + 1];
  }
  return fallback;
}

// The middle value (the upper one of an even count).
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] inline void Die(const absl::Status& s) {
  std::fprintf(stderr, "error: %s\n", s.ToString().c_str());
  std::exit(1);
}

}  // namespace hilnas::bench

#endif  // HILNAS_BENCH_BENCH_UTIL_H_
