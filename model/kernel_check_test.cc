#include "model/kernel_check.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gemv.h"
#include "model/prompt_gemm.h"
#include "model/quant.h"

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
  // runs, the same of the prompt product where the CPU has AVX-512, 8
  // attention cases (4 f32, 2 over an f16 cache, 2 over a q8_0 cache), 2
  // block types x 3 shapes
  const size_t other_forms = GemvFormsHere().size() - 1;
  EXPECT_EQ(check->rows.size(), (OwnPromptGemmAvailable() ? 32u : 23u) + 9 * other_forms);
  size_t form_rows = 0;
  for (const KernelCheckRow& row : check->rows)
    form_rows += row.kernel.find(" form ") != row.kernel.npos;
  EXPECT_EQ(form_rows, 9 * other_forms);
  EXPECT_EQ(check->quant_path, QuantKernelName());
  for (const KernelCheckRow& row : check->rows) {
    EXPECT_GT(row.best_error, 0) << row.kernel << ": a float sum equal to the double one "
                                 << "everywhere means the check compared a thing with itself";
  }
  EXPECT_THAT(check->Report(), HasSubstr("kernels: ok (gemv path "));
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c")) {
    EXPECT_EQ(check->gemv_path, "avx2+fma+f16c");
    EXPECT_THAT(check->quant_path, ::testing::AnyOf("avx2", "avx512vnni"));
  }
#endif
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
