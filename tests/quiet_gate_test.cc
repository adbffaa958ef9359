// The quiet-machine gate against a real CPU hog (issue 18): a child process
// spinning on the CPU the measurement is pinned to. The gate must see it in
// every run taken beside it, discard those runs with their reason, and keep
// only quiet runs or runs it marks noisy. Whether the retaken medians match
// a quiet run's is a timing on a shared machine, measured in
// bench/drift_retake.sh, not asserted here (issue 33). The hog is bounded
// twice: killed by the test, and by alarm() in the child itself.
// Runs alone (RUN_SERIAL): another test on the CPU would be a hog too.

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "device_agent/environment.h"
#include "device_agent/libtorch_runtime.h"
#include "device_agent/protocol.h"
#include "gtest/gtest.h"
#include "tests/cpu_hog.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StartHog;
using ::hilnas::testing::StopHog;

BenchmarkRequest Job() { return hilnas::testing::HogJob("gate", 7); }

TEST(QuietGateTest, RunsBesideAHogAreRetakenAndMediansMatchAQuietRun) {
  ASSERT_TRUE(PinToCpuSet("0").ok());  // this process and libtorch's threads: CPU 0 only
  std::unique_ptr<Runtime> runtime = NewLibtorchRuntime();
  ProtocolOptions gated;
  gated.cooldown_ms = 50;
  gated.max_foreign_cores = 0.25;
  gated.max_discards = 30;
  gated.discard_cooldown_ms = 300;
  gated.cpus = {0};
  ProtocolOptions open = gated;
  open.max_foreign_cores = 0;
  DeviceIdentity device;
  device.set_name("gate-test");

  const BenchmarkResult quiet = MeasureBenchmark(*runtime, Job(), device, gated);
  ASSERT_EQ(quiet.failure(), FAILURE_NONE) << quiet.failure_message();
  ASSERT_EQ(quiet.summaries_size(), 1);
  for (const LatencySample& s : quiet.samples()) {
    EXPECT_GE(s.conditions().window_s(), 0) << "conditions recorded";
  }

  // The hog measured without the gate: it takes half of CPU 0.
  pid_t hog = StartHog(30);
  const BenchmarkResult contaminated = MeasureBenchmark(*runtime, Job(), device, open);
  StopHog(hog);
  ASSERT_EQ(contaminated.failure(), FAILURE_NONE);
  EXPECT_EQ(contaminated.discarded_size(), 0);
  for (const LatencySample& s : contaminated.samples()) {
    EXPECT_GT(s.conditions().foreign_cores(), 0.25) << "the hog shows in the conditions";
  }

  // With the gate: the hog runs for the first 4 s (then dies of its
  // alarm); what was measured beside it is thrown away and retaken.
  hog = StartHog(4);
  const BenchmarkResult gated_result = MeasureBenchmark(*runtime, Job(), device, gated);
  StopHog(hog);
  ASSERT_EQ(gated_result.failure(), FAILURE_NONE) << gated_result.failure_message();
  ASSERT_GE(gated_result.discarded_size(), 1);
  for (const DiscardedRun& d : gated_result.discarded()) {
    EXPECT_NE(d.reason().find("foreign CPU"), std::string::npos) << d.reason();
    EXPECT_GT(d.sample().conditions().foreign_cores(), 0.25);
  }
  // What the gate keeps is either quiet, or marked noisy when the retakes
  // ran out (a busy machine: the test must not assume a quiet one).
  for (const LatencySample& s : gated_result.samples()) {
    EXPECT_TRUE(s.conditions().foreign_cores() <= 0.25 || s.noisy())
        << s.conditions().foreign_cores();
  }
  for (const BenchmarkResult* r : {&quiet, &contaminated, &gated_result}) {
    std::string runs;
    for (const LatencySample& s : r->samples()) {
      runs +=
          " " + std::to_string(s.ttft_ms()) + "/" + std::to_string(s.conditions().foreign_cores());
    }
    std::printf("TTFT ms / foreign cores:%s; %d discarded\n", runs.c_str(), r->discarded_size());
  }
  // How the medians compare with a quiet run's is a measurement, not a
  // test: bench/drift_retake.sh prints it.
}

TEST(QuietGateTest, ProcStatParsesBusyAndStealOfTheChosenCpus) {
  const std::string stat =
      "cpu  300 0 100 5000 10 0 0 40 0 0\n"
      "cpu0 100 0 50 2500 5 0 0 20 0 0\n"
      "cpu1 200 0 50 2500 5 0 0 20 0 0\n"
      "intr 1 2 3\n";
  const CpuCounters all = ParseProcStat(stat, {}, 100);
  EXPECT_TRUE(all.readable);
  EXPECT_DOUBLE_EQ(all.busy_s, 4.0);
  EXPECT_DOUBLE_EQ(all.steal_s, 0.4);
  const CpuCounters one = ParseProcStat(stat, {1}, 100);
  EXPECT_DOUBLE_EQ(one.busy_s, 2.5);
  EXPECT_DOUBLE_EQ(one.steal_s, 0.2);
  EXPECT_EQ(one.cpus, 1);
  EXPECT_FALSE(ParseProcStat("garbage\n", {}, 100).readable);
  EXPECT_FALSE(ParseProcStat("", {}, 100).readable);
}

}  // namespace
}  // namespace hilnas
