#include "model/runtime_tuning.h"

#include <ATen/Parallel.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/quant.h"
#include "model/test_archs.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

// The tuners run in the order each depends on, a progress line each, and
// what they picked is what the process then runs.
TEST(RuntimeTuningTest, TunesInOrderAndLeavesThePicksSet) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 3));
  std::vector<std::string> lines;
  ASSERT_OK_AND_ASSIGN(const RuntimeTuning t,
                       TuneRuntime(d, std::nullopt, [&](const std::string& line) {
                         lines.push_back(line.substr(0, line.find(':')));
                       }));
  EXPECT_THAT(lines, ElementsAre("decode GEMV form", "decode thread pool", "decode attention",
                                 "prompt products"));
  ASSERT_TRUE(t.gemv.has_value());
  EXPECT_EQ(CurrentGemvForm(), t.gemv->chosen);
  EXPECT_EQ(t.gemv_form, t.gemv->Describe());
  EXPECT_EQ(CurrentThreadPool(), t.pool.chosen);
  EXPECT_EQ(t.pool.threads, 2);
  EXPECT_EQ(DecodeSplitWork(), t.split.work);
  EXPECT_THAT(t.quantized, IsEmpty());
  EXPECT_EQ(t.decode_kernel, GemvKernelName());
  SetThreadPool(ThreadPool::kOpenMp);
  at::set_num_threads(threads);
}

// A named form is set, not timed; quantized weights get their line.
TEST(RuntimeTuningTest, ANamedFormIsSetAndQuantizedWeightsAreNamed) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 3, torch::kFloat, "q4_0"));
  std::vector<std::string> lines;
  ASSERT_OK_AND_ASSIGN(
      const RuntimeTuning t,
      TuneRuntime(d, GemvForm::kOneRow, [&](const std::string& line) { lines.push_back(line); }));
  EXPECT_FALSE(t.gemv.has_value());
  EXPECT_EQ(CurrentGemvForm(), GemvForm::kOneRow);
  EXPECT_EQ(t.gemv_form, "one-row (--gemv-form)");
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "decode GEMV form: one-row (--gemv-form)");
  EXPECT_THAT(lines[4], StartsWith("quantized products: "));
  EXPECT_THAT(t.quantized, HasSubstr("integer products; Q4_0 rows grouped"));
  EXPECT_EQ(t.quantized, QuantizedProductsDescription(d));
  EXPECT_EQ(t.decode_kernel, std::string(QuantKernelName()) + " integer products");
  ASSERT_OK_AND_ASSIGN(Decoder f32, Decoder::Create(TinyMixedArch(), 3));
  EXPECT_THAT(QuantizedProductsDescription(f32), IsEmpty());
  EXPECT_THAT(QuantizedProductsDescription(d), Not(IsEmpty()));
}

}  // namespace
}  // namespace hilnas
