// The README's main job end to end, scaled down: `hilnas demo` with a tiny
// campaign starts its coordinator and 2-agent fleet, runs both stages and
// ends with the Pareto table, front.svg and front.csv.
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

using ::hilnas::testing::Process;
using ::testing::HasSubstr;

TEST(DemoTest, RunsBothStagesAndEndsWithAParetoFront) {
  const std::string dir = ::testing::TempDir() + "/hilnas_demo_test";
  std::filesystem::remove_all(dir);
  Process demo({"demo", "--out=" + dir,
                "--config=" + std::string(HILNAS_SOURCE_DIR) + "/tests/data/tiny-demo.textproto"},
               ::testing::TempDir() + "/hilnas_demo_test.log");
  ASSERT_EQ(demo.Wait(), 0) << demo.Log();
  const std::string log = demo.Log();
  EXPECT_THAT(log, HasSubstr("stage 1 done"));
  EXPECT_THAT(log, HasSubstr("by qnehvi"));
  EXPECT_THAT(log, HasSubstr("== Pareto front: 6 trials evaluated"));
  // Measured and scored as the demo's campaign ships: Q4_0 weights, a
  // Q8_0 KV cache.
  EXPECT_THAT(log, HasSubstr("latency at q4_0 weights with q8_0 KV cache, 1 thread(s), TTFT at"));
  EXPECT_THAT(log, HasSubstr("loss after q4_0 with q8_0 KV cache"));
  EXPECT_THAT(log, HasSubstr("| * |"));
  std::string svg, csv;
  ASSERT_TRUE(ReadFileToString(dir + "/front.svg", &svg).ok());
  ASSERT_TRUE(ReadFileToString(dir + "/front.csv", &csv).ok());
  EXPECT_THAT(svg, HasSubstr("Pareto front"));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7);  // header + 6 trials
}

}  // namespace
}  // namespace hilnas
