// The instruction-set extensions hilnas's kernels may use in this process:
// the CPU's own, or fewer where HILNAS_CPU_FEATURES caps them. Every
// kernel that picks its path from the CPU (model/gemv.cc, attention.cc,
// quant_kernels.cc, prompt_gemm.cc, and the OpenBLAS core pinned by
// model/blas_core.cc) asks here, so one variable makes an AVX-512 host run
// exactly what an AVX2-only CPU (AMD Zen 2/3, Intel before Skylake-SP)
// would, or the portable loops: the test suite covers those CPUs' paths on
// whatever CI machine it gets, and bench/ times them beside a llama.cpp
// built for the same instruction sets.
#ifndef HILNAS_UTIL_CPU_FEATURES_H_
#define HILNAS_UTIL_CPU_FEATURES_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hilnas {

// The name of the variable that caps the features: unset or "native" (the
// CPU's own), "avx2" (x86: everything but AVX-512), "dotprod" (arm64: no
// 8-bit matrix multiply, as an Armv8.2-8.5 core such as the Cortex-A76),
// "neon" (arm64: no dot-product instructions either), "portable" (no
// hand-written vector path).
inline constexpr char kCpuFeaturesVariable[] = "HILNAS_CPU_FEATURES";

struct CpuFeatures {
  // x86-64
  bool avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512cd = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512vnni = false;
  // arm64 (NEON itself is part of the baseline: `neon` false only when
  // capped); i8mm: SMMLA, the 8-bit matrix multiply (FEAT_I8MM: Armv8.6,
  // and the Cortex-A510/A710/X2 and later cores of phones since 2022)
  bool neon = false, dotprod = false, i8mm = false;

  // The three the AVX2 kernels compile for (target("avx2,fma,f16c")).
  bool Avx2FmaF16c() const { return avx2 && fma && f16c; }
  // Space-separated names of the features set, "none" if none.
  std::string Names() const;
};

// What this CPU reports (cpuid, getauxval), uncapped.
CpuFeatures HostCpuFeatures();

// `host` with everything above `cap` cleared; a cap never adds a feature
// the host lacks. "" and "native" leave `host` as it is. An unknown cap,
// or one of the other architecture, is an error naming the variable and
// the value.
absl::StatusOr<CpuFeatures> CapCpuFeatures(const CpuFeatures& host, absl::string_view cap);

// The features the kernels use: HostCpuFeatures() capped by
// HILNAS_CPU_FEATURES, read once per process. An invalid value is reported
// on stderr once and ignored; tools call CheckCpuFeaturesCap() first so a
// user sees it as an error.
const CpuFeatures& KernelCpuFeatures();

// Whether HILNAS_CPU_FEATURES caps the kernels' features (set to a valid
// value other than "native").
bool CpuFeaturesCapped();

// OK when HILNAS_CPU_FEATURES is unset or valid on this CPU's architecture.
absl::Status CheckCpuFeaturesCap();

// "" when nothing is capped; else e.g. "features capped by
// HILNAS_CPU_FEATURES=avx2 (this CPU also has avx512f avx512cd ...)", for
// the kernels lines of `hilnas run`, the agents' DeviceIdentity and
// `hilnas agent --check-kernels`.
std::string CpuFeaturesCapNote();

}  // namespace hilnas

#endif  // HILNAS_UTIL_CPU_FEATURES_H_
