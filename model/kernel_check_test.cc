#include "model/kernel_check.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gemv.h"
#include "model/prompt_gemm.h"
#include "model/quant.h"
#include "util/cpu_features.h"

namespace hilnas {
namespace {

using ::testing::HasSubstr;

// On the build machine the best path (AVX2 where the CPU has it) and the
// portable loop both hold to the double reference on 2 threads; the arm64
// test runs the same check through the NEON path under qemu.
TEST(KernelCheckTest, BestAndPortablePathsHoldToTheDoubleReference) {
  absl::StatusOr<KernelCheck> check = CheckKernels(2);
  ASSERT_TRUE(check.ok()) << check.status();
  EXPECT_TRUE(check->ok()) << check->Report();
  EXPECT_EQ(check->gemv_path, GemvKernelName());
  // 3 types x 3 shapes of GEMV, each again in every other form this CPU
  // runs, the same of the prompt product where the CPU has AVX-512, 9
  // attention cases (4 f32, 3 over an f16 cache, 2 over a q8_0 cache), the
  // f16 cache write, the Q8_0 activations' bytes, the SwiGLU and GeGLU
  // rows, 2 block types x 3 shapes and a 67-token Q8_0 product, and 3
  // shapes of Q4_0 rows grouped eight at a time
  const size_t other_forms = GemvFormsHere().size() - 1;
  EXPECT_EQ(check->rows.size(), (OwnPromptGemmAvailable() ? 41u : 32u) + 9 * other_forms);
  EXPECT_EQ(
      std::count_if(check->rows.begin(), check->rows.end(),
                    [](const KernelCheckRow& r) { return r.kernel.rfind("q4_0 grouped", 0) == 0; }),
      3);
  size_t form_rows = 0;
  for (const KernelCheckRow& row : check->rows)
    form_rows += row.kernel.find(" form ") != row.kernel.npos;
  EXPECT_EQ(form_rows, 9 * other_forms);
  EXPECT_EQ(check->quant_path, QuantKernelName());
  for (const KernelCheckRow& row : check->rows) {
    // The cache write's and the activations' error is the share of values
    // whose bits differ.
    if (row.kernel.rfind("cache write", 0) == 0 ||
        row.kernel.find("activations") != row.kernel.npos) {
      EXPECT_EQ(row.best_error, 0) << row.kernel;
      continue;
    }
    EXPECT_GT(row.best_error, 0) << row.kernel << ": a float sum equal to the double one "
                                 << "everywhere means the check compared a thing with itself";
  }
  EXPECT_THAT(check->Report(), HasSubstr("kernels: ok (gemv path "));
#if defined(__x86_64__)
  if (KernelCpuFeatures().Avx2FmaF16c()) {
    EXPECT_EQ(check->gemv_path, "avx2+fma+f16c");
    EXPECT_THAT(check->quant_path, ::testing::AnyOf("avx2", "avx512vnni"));
  }
#endif
}

// Each kernel takes its path from the features util/cpu_features.h hands
// it, so ctest's runs of this binary under HILNAS_CPU_FEATURES=avx2 and
// =portable (model/CMakeLists.txt) run an AVX2-only CPU's and a baseline
// CPU's paths, and every exactness test above and beside this one checks
// them. Without a cap the paths are the CPU's own.
TEST(KernelCheckTest, TheKernelsTakeThePathsOfTheFeaturesTheyAreGiven) {
  const CpuFeatures& c = KernelCpuFeatures();
  const std::vector<GemvForm> forms = GemvFormsHere();
  const bool four_rows = std::find(forms.begin(), forms.end(), GemvForm::kFourRows) != forms.end();
#if defined(__x86_64__)
  EXPECT_EQ(GemvKernelName(), std::string(c.Avx2FmaF16c() ? "avx2+fma+f16c" : "portable"));
  EXPECT_EQ(QuantKernelName(), std::string(!c.Avx2FmaF16c()             ? "portable"
                                           : c.avx512vl && c.avx512vnni ? "avx512vnni"
                                                                        : "avx2"));
  EXPECT_EQ(OwnPromptGemmAvailable(), c.avx512f);
  EXPECT_EQ(four_rows, c.Avx2FmaF16c() && c.avx512f && c.avx512vl);
  EXPECT_EQ(forms.size(), c.Avx2FmaF16c() ? (four_rows ? 4u : 3u) : 1u);
#elif defined(__aarch64__)
  EXPECT_EQ(GemvKernelName(), std::string(c.neon ? "neon" : "portable"));
  EXPECT_EQ(QuantKernelName(), std::string(!c.neon               ? "portable"
                                           : c.dotprod && c.i8mm ? "neon+i8mm"
                                           : c.dotprod           ? "neon+dotprod"
                                                                 : "neon"));
  EXPECT_EQ(four_rows, c.neon);
#endif
  const char* cap = std::getenv(kCpuFeaturesVariable);
  if (cap != nullptr && std::string(cap) != "native") {
    absl::StatusOr<KernelCheck> check = CheckKernels(1);
    ASSERT_TRUE(check.ok()) << check.status();
    EXPECT_THAT(check->Report(), HasSubstr(std::string("kernels: features capped by ") +
                                           kCpuFeaturesVariable + "=" + cap));
  }
}

TEST(KernelCheckTest, AFailedRowFailsTheCheckAndIsNamed) {
  absl::StatusOr<KernelCheck> check = CheckKernels(1);
  ASSERT_TRUE(check.ok()) << check.status();
  check->rows[0].best_error = 1e-3;
  check->rows[0].ok = false;
  EXPECT_FALSE(check->ok());
  EXPECT_THAT(check->Report(), HasSubstr("OVER TOLERANCE"));
  EXPECT_THAT(check->Report(), HasSubstr("kernels: FAILED"));
  EXPECT_EQ(CheckKernels(0).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hilnas
