#include "util/cpu_features.h"

#include <cstdlib>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hilnas {
namespace {

using ::testing::HasSubstr;

// Every flag set, as no real CPU has: what a cap clears shows plainly.
CpuFeatures Everything() {
  CpuFeatures c;
  c.avx = c.avx2 = c.fma = c.f16c = true;
  c.avx512f = c.avx512cd = c.avx512bw = c.avx512dq = c.avx512vl = c.avx512vnni = true;
  c.neon = c.dotprod = true;
  return c;
}

TEST(CpuFeaturesTest, NativeAndUnsetLeaveTheHostAsItIs) {
  for (const char* cap : {"", "native"}) {
    absl::StatusOr<CpuFeatures> c = CapCpuFeatures(Everything(), cap);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->Names(), Everything().Names()) << cap;
  }
}

TEST(CpuFeaturesTest, PortableClearsEveryFeature) {
  absl::StatusOr<CpuFeatures> c = CapCpuFeatures(Everything(), "portable");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->Names(), "none");
  EXPECT_FALSE(c->Avx2FmaF16c());
}

#if defined(__x86_64__)
TEST(CpuFeaturesTest, Avx2ClearsAvx512AndKeepsTheRest) {
  absl::StatusOr<CpuFeatures> c = CapCpuFeatures(Everything(), "avx2");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->Names(), "avx avx2 fma f16c neon dotprod");
  EXPECT_TRUE(c->Avx2FmaF16c());
}

TEST(CpuFeaturesTest, ACapNeverAddsWhatTheHostLacks) {
  CpuFeatures old_cpu;
  old_cpu.avx = true;  // Sandy Bridge: AVX, no AVX2
  absl::StatusOr<CpuFeatures> c = CapCpuFeatures(old_cpu, "avx2");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->Names(), "avx");
}

TEST(CpuFeaturesTest, TheOtherArchitecturesCapIsAnErrorNamingTheVariable) {
  absl::StatusOr<CpuFeatures> c = CapCpuFeatures(Everything(), "neon");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("HILNAS_CPU_FEATURES=neon"));
  EXPECT_THAT(c.status().message(), HasSubstr("avx2"));
}
#elif defined(__aarch64__)
TEST(CpuFeaturesTest, NeonClearsTheDotProduct) {
  absl::StatusOr<CpuFeatures> c = CapCpuFeatures(Everything(), "neon");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->neon);
  EXPECT_FALSE(c->dotprod);
}
#endif

TEST(CpuFeaturesTest, AnUnknownCapIsAnErrorNamingTheValue) {
  absl::StatusOr<CpuFeatures> c = CapCpuFeatures(Everything(), "avx-512");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(c.status().message(), HasSubstr("HILNAS_CPU_FEATURES=avx-512"));
}

// The process's own cap (ctest runs the unit tests without one, and
// model_test again under each cap): what the kernels use is the host's
// features capped as the variable says, and the note says so.
TEST(CpuFeaturesTest, TheKernelsFeaturesFollowTheVariable) {
  const char* value = std::getenv(kCpuFeaturesVariable);
  absl::StatusOr<CpuFeatures> want = CapCpuFeatures(HostCpuFeatures(), value ? value : "");
  ASSERT_TRUE(want.ok()) << want.status();
  EXPECT_EQ(KernelCpuFeatures().Names(), want->Names());
  EXPECT_TRUE(CheckCpuFeaturesCap().ok());
  const bool capped = value != nullptr && std::string(value) != "native" && value[0] != '\0';
  EXPECT_EQ(CpuFeaturesCapped(), capped);
  if (!capped) {
    EXPECT_EQ(CpuFeaturesCapNote(), "");
  } else {
    EXPECT_THAT(CpuFeaturesCapNote(), HasSubstr(std::string("HILNAS_CPU_FEATURES=") + value));
  }
}

}  // namespace
}  // namespace hilnas
