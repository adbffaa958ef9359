#include "util/cpu_features.h"

#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

#if defined(__aarch64__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1 << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1 << 13)
#endif
#endif

namespace hilnas {
namespace {

// Each feature's name beside its flag, in the order Names() lists them.
constexpr std::pair<const char*, bool CpuFeatures::*> kFeatures[] = {
    {"avx", &CpuFeatures::avx},           {"avx2", &CpuFeatures::avx2},
    {"fma", &CpuFeatures::fma},           {"f16c", &CpuFeatures::f16c},
    {"avx512f", &CpuFeatures::avx512f},   {"avx512cd", &CpuFeatures::avx512cd},
    {"avx512bw", &CpuFeatures::avx512bw}, {"avx512dq", &CpuFeatures::avx512dq},
    {"avx512vl", &CpuFeatures::avx512vl}, {"avx512vnni", &CpuFeatures::avx512vnni},
    {"neon", &CpuFeatures::neon},         {"dotprod", &CpuFeatures::dotprod},
    {"i8mm", &CpuFeatures::i8mm},
};

struct Capped {
  CpuFeatures features;
  std::string cap;  // "" when nothing is capped
};

const Capped& KernelCapped() {
  static const Capped capped = [] {
    Capped out{HostCpuFeatures(), ""};
    const char* value = std::getenv(kCpuFeaturesVariable);
    if (value == nullptr) return out;
    absl::StatusOr<CpuFeatures> features = CapCpuFeatures(out.features, value);
    if (!features.ok()) {
      std::fprintf(stderr, "hilnas: %s; using the CPU's own features\n",
                   std::string(features.status().message()).c_str());
      return out;
    }
    out.features = *features;
    if (std::string(value) != "native" && !std::string(value).empty()) out.cap = value;
    return out;
  }();
  return capped;
}

}  // namespace

std::string CpuFeatures::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, flag] : kFeatures) {
    if (this->*flag) names.push_back(name);
  }
  return names.empty() ? "none" : absl::StrJoin(names, " ");
}

CpuFeatures HostCpuFeatures() {
  CpuFeatures c;
#if defined(__x86_64__)
  c.avx = __builtin_cpu_supports("avx");
  c.avx2 = __builtin_cpu_supports("avx2");
  c.fma = __builtin_cpu_supports("fma");
  c.f16c = __builtin_cpu_supports("f16c");
  c.avx512f = __builtin_cpu_supports("avx512f");
  c.avx512cd = __builtin_cpu_supports("avx512cd");
  c.avx512bw = __builtin_cpu_supports("avx512bw");
  c.avx512dq = __builtin_cpu_supports("avx512dq");
  c.avx512vl = __builtin_cpu_supports("avx512vl");
  c.avx512vnni = __builtin_cpu_supports("avx512vnni");
#elif defined(__aarch64__)
  c.neon = true;
  c.dotprod = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
  c.i8mm = (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#endif
  return c;
}

absl::StatusOr<CpuFeatures> CapCpuFeatures(const CpuFeatures& host, absl::string_view cap) {
  if (cap.empty() || cap == "native") return host;
  if (cap == "portable") return CpuFeatures{};
#if defined(__x86_64__)
  if (cap == "avx2") {
    CpuFeatures out = host;
    out.avx512f = out.avx512cd = out.avx512bw = out.avx512dq = out.avx512vl = false;
    out.avx512vnni = false;
    return out;
  }
  constexpr char kHere[] = "native, avx2 or portable on x86-64";
#elif defined(__aarch64__)
  if (cap == "dotprod" || cap == "neon") {
    CpuFeatures out = host;
    out.i8mm = false;
    if (cap == "neon") out.dotprod = false;
    return out;
  }
  constexpr char kHere[] = "native, dotprod, neon or portable on arm64";
#else
  constexpr char kHere[] = "native or portable";
#endif
  return absl::InvalidArgumentError(
      absl::StrCat(kCpuFeaturesVariable, "=", cap, ": not a cap this build knows (", kHere, ")"));
}

const CpuFeatures& KernelCpuFeatures() { return KernelCapped().features; }

bool CpuFeaturesCapped() { return !KernelCapped().cap.empty(); }

absl::Status CheckCpuFeaturesCap() {
  const char* value = std::getenv(kCpuFeaturesVariable);
  if (value == nullptr) return absl::OkStatus();
  return CapCpuFeatures(HostCpuFeatures(), value).status();
}

std::string CpuFeaturesCapNote() {
  const Capped& capped = KernelCapped();
  if (capped.cap.empty()) return "";
  const CpuFeatures host = HostCpuFeatures();
  std::vector<std::string> dropped;  // what this CPU has and the cap cleared
  for (const auto& [name, flag] : kFeatures) {
    if (host.*flag && !(capped.features.*flag)) dropped.push_back(name);
  }
  return absl::StrCat("features capped by ", kCpuFeaturesVariable, "=", capped.cap,
                      dropped.empty()
                          ? " (nothing of this CPU's dropped)"
                          : absl::StrCat(" (not used: ", absl::StrJoin(dropped, " "), ")"));
}

}  // namespace hilnas
