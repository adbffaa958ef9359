#include "model/blas_core.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace hilnas {
namespace {

constexpr char kPinnedFrom[] = "HILNAS_BLAS_PINNED_FROM";

// openblas_get_corename, looked up at run time: hilnas links libtorch, not
// OpenBLAS, and with another BLAS behind libblas.so.3 there is none.
std::string LoadedCore() {
  using CoreName = char* (*)();
  auto fn = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (fn == nullptr) return "";
  const char* name = fn();
  return name == nullptr ? "" : name;
}

std::string WantedCore() {
#if defined(__x86_64__)
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return BlasCoreForFeatures(avx512, avx2_fma);
#else
  return "";  // OpenBLAS's arm64 table reads the core type, not a model list
#endif
}

}  // namespace

std::string BlasCoreForFeatures(bool avx512, bool avx2_fma) {
  if (avx512) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return "";
}

bool BlasCoreCovers(absl::string_view loaded, absl::string_view wanted) {
  const std::string have = absl::AsciiStrToLower(loaded);
  const std::string want = absl::AsciiStrToLower(wanted);
  if (want.empty() || have == want) return true;
  const bool avx512 = have == "skylakex" || have == "cooperlake" || have == "sapphirerapids";
  if (want == "skylakex") return avx512;
  if (want == "haswell") return avx512 || have == "zen";
  return false;
}

bool SetBlasCoreForCpu() {
  const char* mode = std::getenv("HILNAS_BLAS_CORE");
  const std::string how = mode == nullptr ? "" : mode;
  if (how == "keep" || std::getenv(kPinnedFrom) != nullptr) return false;
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr && how != "auto") return false;
  const std::string loaded = LoadedCore();
  const std::string wanted = WantedCore();
  if (loaded.empty() || BlasCoreCovers(loaded, wanted)) return false;
  setenv(kPinnedFrom, loaded.c_str(), 1);
  setenv("OPENBLAS_CORETYPE", wanted.c_str(), 1);
  return true;
}

void PinBlasCoreToCpu(char** argv) {
  if (SetBlasCoreForCpu()) ReexecForBlasCore(argv);
}

void ReexecForBlasCore(char** argv) {
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);
  std::fprintf(stderr, "hilnas: could not re-execute with OPENBLAS_CORETYPE=%s; matrix products use "
                       "OpenBLAS's %s kernels\n",
               std::getenv("OPENBLAS_CORETYPE"), std::getenv(kPinnedFrom));
}

std::string BlasCoreDescription() {
  const std::string loaded = LoadedCore();
  if (loaded.empty()) return "not OpenBLAS";
  std::string out = absl::StrCat("OpenBLAS ", loaded);
  const char* from = std::getenv(kPinnedFrom);
  const std::string wanted = WantedCore();
  if (from != nullptr && BlasCoreCovers(loaded, wanted)) {
    absl::StrAppend(&out, " (pinned by hilnas: OpenBLAS chose ", from, ")");
  } else if (!BlasCoreCovers(loaded, wanted)) {
    absl::StrAppend(&out, " (below this CPU's ", wanted,
                    std::getenv("OPENBLAS_CORETYPE") != nullptr
                        ? ": OPENBLAS_CORETYPE is set; HILNAS_BLAS_CORE=auto overrides it)"
                        : ")");
  }
  return out;
}

}  // namespace hilnas
