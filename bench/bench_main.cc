// hilnas-bench: runs the benchmark its name (argv[0], through the links
// build/bench/NAME) or its first argument names (bench/benches.h).
#include <cstdio>
#include <cstring>

#include "bench/benches.h"

namespace {

struct Program {
  const char* name;
  int (*main)(int argc, char** argv);
};

#define HILNAS_BENCH_ENTRY(NAME) {#NAME, &NAME##_main::Main},
constexpr Program kPrograms[] = {HILNAS_BENCHES(HILNAS_BENCH_ENTRY)};
#undef HILNAS_BENCH_ENTRY

const Program* Find(const char* name) {
  for (const Program& p : kPrograms) {
    if (!std::strcmp(p.name, name)) return &p;
  }
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  const char* slash = argc > 0 ? std::strrchr(argv[0], '/') : nullptr;
  const char* self = slash ? slash + 1 : (argc > 0 ? argv[0] : "");
  if (const Program* p = Find(self)) return p->main(argc, argv);
  // `hilnas-bench NAME ARGS...`: NAME becomes the program's argv[0], so a
  // re-execution through /proc/self/exe finds it by name.
  if (argc > 1) {
    if (const Program* p = Find(argv[1])) return p->main(argc - 1, argv + 1);
  }
  std::fprintf(stderr,
               "usage: hilnas-bench NAME [ARGS...], or run build/bench/NAME; NAME is one of:\n");
  for (const Program& p : kPrograms) std::fprintf(stderr, "  %s\n", p.name);
  return 2;
}
