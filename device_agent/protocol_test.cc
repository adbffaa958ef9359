#include "device_agent/protocol.h"

#include <sys/mman.h>

#include <cstring>
#include <deque>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device_agent/environment.h"
#include "device_agent/libtorch_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gemv.h"
#include "model/prompt_gemm.h"
#include "model/quant.h"
#include "model/test_archs.h"
#include "model/work_split.h"
#include "search_space/arch.h"

namespace hilnas {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Replays scripted TTFTs, or fails at Prepare or at a given run.
class ScriptedRuntime : public Runtime {
 public:
  std::deque<double> ttfts;
  std::deque<double> decodes;  // 10 ms/token once these run out
  absl::Status prepare_status;
  absl::Status run_status;  // returned once ttfts run out
  bool run_throws = false;  // Run throws std::bad_alloc once ttfts run out
  int fault_runs = 0;       // the first this many runs touch 8 MiB of fresh pages
  int runs = 0;
  ~ScriptedRuntime() {
    for (void* m : mappings) munmap(m, kFreshBytes);
  }

  std::string name() const override { return "scripted"; }
  std::string version() const override { return "1"; }
  absl::StatusOr<std::unique_ptr<PreparedModel>> Prepare(const BenchmarkRequest&) override {
    if (!prepare_status.ok()) return prepare_status;
    return std::unique_ptr<PreparedModel>(new Model(this));
  }

 private:
  struct Model : PreparedModel {
    explicit Model(ScriptedRuntime* r) : r(r) {}
    absl::StatusOr<RunTiming> Run(int, int decode_tokens) override {
      if (++r->runs <= r->fault_runs) r->TouchFreshPages();
      if (r->ttfts.empty() && r->run_throws) throw std::bad_alloc();
      if (r->ttfts.empty()) return r->run_status;
      RunTiming t;
      t.ttft_ms = r->ttfts.front();
      t.decode_ms_per_token = 10.0;
      t.decode_tokens = decode_tokens;
      r->ttfts.pop_front();
      if (!r->decodes.empty()) {
        t.decode_ms_per_token = r->decodes.front();
        r->decodes.pop_front();
      }
      return t;
    }
    ScriptedRuntime* r;
  };
  static constexpr size_t kFreshBytes = size_t{8} << 20;
  // As a heap that still grows: memory the process has not used before,
  // on 4 KiB pages (2048 faults).
  void TouchFreshPages() {
    void* m =
        mmap(nullptr, kFreshBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    madvise(m, kFreshBytes, MADV_NOHUGEPAGE);
    std::memset(m, 1, kFreshBytes);
    mappings.push_back(m);
  }
  std::vector<void*> mappings;
};

BenchmarkRequest Request(int repeats, int max_repeats, double spread) {
  BenchmarkRequest r;
  *r.mutable_arch() = ArchToProto(TinyMixedArch());
  r.add_prompt_lengths(8);
  r.set_decode_tokens(2);
  r.set_warmup_runs(1);
  r.set_repeats(repeats);
  r.set_max_repeats(max_repeats);
  r.set_max_rel_spread(spread);
  return r;
}

ProtocolOptions NoCooldown() {
  ProtocolOptions o;
  o.cooldown_ms = 0;
  return o;
}

TEST(ProtocolTest, EveryRunRecordsTheMemoryProbeTakenBeforeIt) {
  ScriptedRuntime rt;
  rt.ttfts = {500, 100, 100, 100};
  const BenchmarkRequest req = Request(3, 3, 0.05);
  const BenchmarkResult r = MeasureBenchmark(rt, req, DeviceIdentity(), NoCooldown());
  ASSERT_EQ(r.samples_size(), 3);
  for (const LatencySample& s : r.samples()) {
    EXPECT_EQ(s.conditions().memory_probe_bytes(), MemoryProbeBytes(req, 8));
    EXPECT_GT(s.conditions().memory_probe_ms(), 0);
    EXPECT_GT(s.conditions().memory_probe_ratio(), 0);
    EXPECT_EQ(s.conditions().memory_waits(), 0);  // the gate is off by default
  }
  EXPECT_EQ(r.discarded_size(), 0);
}

// A baseline no reading can meet: every probe is "slow", the gate waits
// its limit before each run, then discards the run, and once the retakes
// run out keeps runs marked noisy.
TEST(ProtocolTest, TheMemoryGateWaitsThenDiscardsRunsTakenWhileMemoryIsSlow) {
  ScriptedRuntime rt;
  rt.ttfts = {500, 100, 100, 100, 100, 100, 100};
  const BenchmarkRequest req = Request(3, 3, 0.05);
  MemoryProbeHistory history;
  for (int i = 0; i < 20; ++i) history.Add(MemoryProbeBytes(req, 8), 1e-9);
  ProtocolOptions o = NoCooldown();
  o.max_memory_slowdown = 0.10;
  o.max_memory_waits = 2;
  o.memory_wait_ms = 1;
  o.max_discards = 2;
  o.discard_cooldown_ms = 0;
  o.memory_history = &history;
  const BenchmarkResult r = MeasureBenchmark(rt, req, DeviceIdentity(), o);
  ASSERT_EQ(r.discarded_size(), 2);
  for (const DiscardedRun& d : r.discarded()) {
    EXPECT_NE(d.reason().find("memory probe"), std::string::npos) << d.reason();
    EXPECT_EQ(d.sample().conditions().memory_waits(), 2);
  }
  ASSERT_EQ(r.samples_size(), 3);
  for (const LatencySample& s : r.samples()) EXPECT_TRUE(s.noisy());
}

TEST(ProtocolTest, TheMemoryBaselineIsALowPercentileOfTheReadings) {
  MemoryProbeHistory h;
  EXPECT_DOUBLE_EQ(h.Add(1 << 20, 2.0), 1.0);
  EXPECT_DOUBLE_EQ(h.Add(1 << 20, 3.0), 1.5);  // the fastest while at most 10
  EXPECT_DOUBLE_EQ(h.BaselineMs(1 << 20), 2.0);
  for (int i = 0; i < 20; ++i) h.Add(1 << 20, 10.0 + i);
  EXPECT_DOUBLE_EQ(h.BaselineMs(1 << 20), 10.0);  // 22 readings: the 3rd fastest
  EXPECT_EQ(h.Readings(1 << 20), 22);
  EXPECT_EQ(h.Readings(2 << 20), 0);
}

TEST(ProtocolTest, StopsAtMinimumRepeatsWhenSpreadIsSmall) {
  ScriptedRuntime rt;
  rt.ttfts = {500 /*warm-up*/, 100, 101, 100, 300, 300};
  BenchmarkResult r = MeasureBenchmark(rt, Request(3, 10, 0.05), DeviceIdentity(), NoCooldown());
  EXPECT_EQ(r.failure(), FAILURE_NONE);
  ASSERT_EQ(r.samples_size(), 3);  // the warm-up is not a sample
  ASSERT_EQ(r.summaries_size(), 1);
  EXPECT_DOUBLE_EQ(r.summaries(0).ttft_median_ms(), 100);
  EXPECT_DOUBLE_EQ(r.summaries(0).decode_tokens_per_s(), 100);
  EXPECT_GT(r.summaries(0).ttft_stderr_ms(), 0);
  EXPECT_EQ(r.device().runtime(), "scripted");
}

TEST(ProtocolTest, MemoryIsUnsettledPastTheKvCachesPagesAndAMebibyte) {
  EXPECT_FALSE(MemoryUnsettled(0, 0));
  EXPECT_FALSE(MemoryUnsettled(256, 0));
  EXPECT_TRUE(MemoryUnsettled(257, 0));
  EXPECT_FALSE(MemoryUnsettled(1024 + 256, int64_t{4} << 20));  // a 4 MiB cache on small pages
  EXPECT_TRUE(MemoryUnsettled(9216, int64_t{4} << 20));
  // Only after the warm-ups asked for, and at most kMaxSettlingWarmups more.
  EXPECT_FALSE(OneMoreWarmUp(1, 2, 9216, 0));
  EXPECT_TRUE(OneMoreWarmUp(2, 2, 9216, 0));
  EXPECT_FALSE(OneMoreWarmUp(2, 2, 0, 0));
  EXPECT_TRUE(OneMoreWarmUp(2 + kMaxSettlingWarmups - 1, 2, 9216, 0));
  EXPECT_FALSE(OneMoreWarmUp(2 + kMaxSettlingWarmups, 2, 9216, 0));
  EXPECT_FALSE(OneMoreWarmUp(0, 0, 9216, 0));
}

// Warm-ups go on while a run faults in fresh memory, up to
// kMaxSettlingWarmups more than asked for; none are added once it stops.
TEST(ProtocolTest, WarmUpsLastUntilMemorySettles) {
  for (const auto& [fault_runs, warmups] : {std::pair{0, 1}, {1, 2}, {3, 4}, {100, 5}}) {
    ScriptedRuntime rt;
    rt.fault_runs = fault_runs;
    rt.ttfts = std::deque<double>(20, 100);
    BenchmarkResult r = MeasureBenchmark(rt, Request(3, 3, 0.5), DeviceIdentity(), NoCooldown());
    EXPECT_EQ(r.failure(), FAILURE_NONE);
    EXPECT_EQ(r.samples_size(), 3);
    EXPECT_EQ(rt.runs - 3, warmups) << "runs on fresh memory: " << fault_runs;
  }
}

TEST(ProtocolTest, RepeatsUntilSpreadFallsOrCapIsHit) {
  ScriptedRuntime rt;
  rt.ttfts = {1, 100, 150, 100, 100, 100, 100, 100, 100};
  BenchmarkResult r = MeasureBenchmark(rt, Request(3, 6, 0.05), DeviceIdentity(), NoCooldown());
  // Spread after 3: MAD/median = 0; 100,150,100 -> MAD 0 -> stops at 3.
  EXPECT_EQ(r.samples_size(), 3);

  ScriptedRuntime noisy;
  noisy.ttfts = {1, 100, 150, 200, 100, 150, 200, 100, 150, 200};
  r = MeasureBenchmark(noisy, Request(3, 6, 0.05), DeviceIdentity(), NoCooldown());
  EXPECT_EQ(r.samples_size(), 6);  // never settles: the cap stops it
  EXPECT_GT(r.summaries(0).ttft_rel_spread(), 0.05);
}

TEST(ProtocolTest, NoisyDecodeKeepsRepeatingEvenWhenTtftIsSteady) {
  ScriptedRuntime rt;
  rt.ttfts = {1, 100, 100, 100, 100, 100, 100};
  rt.decodes = {10, 10, 20, 30, 10, 20, 30};
  BenchmarkResult r = MeasureBenchmark(rt, Request(3, 6, 0.05), DeviceIdentity(), NoCooldown());
  EXPECT_EQ(r.samples_size(), 6);
}

TEST(ProtocolTest, SteadySlowdownIsFlaggedAsThrottling) {
  ScriptedRuntime rt;
  rt.ttfts = {1, 100, 110, 121, 133, 146, 161};
  BenchmarkResult r = MeasureBenchmark(rt, Request(6, 6, 0.05), DeviceIdentity(), NoCooldown());
  EXPECT_TRUE(r.throttling_suspected());
}

TEST(ProtocolTest, PrepareFailureBecomesStructuredFailure) {
  ScriptedRuntime rt;
  rt.prepare_status = absl::ResourceExhaustedError("needs 9 GiB; device allows 4 GiB");
  BenchmarkResult r = MeasureBenchmark(rt, Request(3, 3, 0.05), DeviceIdentity(), NoCooldown());
  EXPECT_EQ(r.failure(), OUT_OF_MEMORY);
  EXPECT_THAT(r.failure_message(), HasSubstr("9 GiB"));

  rt.prepare_status = absl::UnimplementedError("precision INT8_DYNAMIC");
  EXPECT_EQ(MeasureBenchmark(rt, Request(3, 3, 0.05), DeviceIdentity(), NoCooldown()).failure(),
            UNSUPPORTED_ARCH);
}

TEST(ProtocolTest, ARuntimeThatThrowsIsARuntimeErrorWithTheCause) {
  ScriptedRuntime rt;
  rt.ttfts = {100, 100};
  rt.run_throws = true;
  BenchmarkResult r = MeasureBenchmark(rt, Request(3, 3, 0.05), DeviceIdentity(), NoCooldown());
  EXPECT_EQ(r.failure(), RUNTIME_ERROR);
  EXPECT_THAT(r.failure_message(), HasSubstr("the runtime threw: std::bad_alloc"));
}

TEST(ProtocolTest, RunFailureKeepsSamplesMeasuredSoFar) {
  ScriptedRuntime rt;
  rt.ttfts = {1, 100, 100};
  rt.run_status = absl::InternalError("runner crashed");
  BenchmarkResult r = MeasureBenchmark(rt, Request(5, 5, 0.05), DeviceIdentity(), NoCooldown());
  EXPECT_EQ(r.failure(), RUNTIME_ERROR);
  EXPECT_EQ(r.samples_size(), 2);
  EXPECT_THAT(r.failure_message(), HasSubstr("runner crashed"));
}

TEST(ProtocolTest, CancelStopsMeasurement) {
  ScriptedRuntime rt;
  rt.ttfts = {1, 100, 100, 100};
  std::atomic<bool> cancel{true};
  ProtocolOptions o = NoCooldown();
  o.cancel = &cancel;
  BenchmarkResult r = MeasureBenchmark(rt, Request(3, 3, 0.05), DeviceIdentity(), o);
  EXPECT_EQ(r.failure(), RUNTIME_ERROR);
  EXPECT_THAT(r.failure_message(), HasSubstr("cancelled"));
}

TEST(ProtocolTest, InvalidRequestIsRejectedWithFieldName) {
  ScriptedRuntime rt;
  BenchmarkRequest req = Request(3, 3, 0.05);
  req.set_prompt_lengths(0, -4);
  BenchmarkResult r = MeasureBenchmark(rt, req, DeviceIdentity(), NoCooldown());
  EXPECT_EQ(r.failure(), UNSUPPORTED_ARCH);
  EXPECT_THAT(r.failure_message(), HasSubstr("prompt_lengths value -4"));
  EXPECT_EQ(rt.runs, 0);
}

// --cpu-set as the agents take it: util's CPU list, within a CPU mask.
TEST(EnvironmentTest, CpuSetsAreCpuListsWithinAMask) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuSet("4-7,1");
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_THAT(*cpus, ::testing::ElementsAre(1, 4, 5, 6, 7));
  EXPECT_THAT(ParseCpuSet("0-x").status().message(), HasSubstr("\"0-x\" is not a CPU"));
  EXPECT_THAT(ParseCpuSet("").status().message(), HasSubstr("is empty"));
  EXPECT_THAT(ParseCpuSet("3000").status().message(), HasSubstr("CPU 3000 is past the"));
}

TEST(ProtocolTest, DefaultsFollowThePaper) {
  BenchmarkRequest r = WithDefaults(BenchmarkRequest());
  EXPECT_THAT(r.prompt_lengths(), ::testing::ElementsAre(1024, 2048, 4096));
  EXPECT_EQ(r.prefill_chunk(), 1024);
  EXPECT_EQ(r.repeats(), 3);
  EXPECT_EQ(r.precision(), FP32);
}

TEST(LibtorchRuntimeTest, MeasuresTinyModelForEveryPromptLength) {
  std::unique_ptr<Runtime> rt = NewLibtorchRuntime();
  BenchmarkRequest req = Request(2, 3, 1.0);
  req.add_prompt_lengths(16);
  req.set_prefill_chunk(4);
  BenchmarkResult r = MeasureBenchmark(*rt, req, DeviceIdentity(), NoCooldown());
  ASSERT_EQ(r.failure(), FAILURE_NONE) << r.failure_message();
  EXPECT_EQ(r.samples_size(), 4);
  ASSERT_EQ(r.summaries_size(), 2);
  for (const LatencySample& s : r.samples()) {
    EXPECT_GT(s.ttft_ms(), 0);
    EXPECT_GT(s.decode_ms_per_token(), 0);
    EXPECT_EQ(s.decode_tokens(), 2);
    EXPECT_GT(s.peak_rss_bytes(), 0);
  }
  EXPECT_EQ(r.device().runtime(), "libtorch-cpu");
  // The decode kernel's forms were timed on the model before the runs, and
  // the pick is the process's form (model/gemv.h).
  EXPECT_THAT(r.device().runtime_kernels(), HasSubstr("GEMV form"));
  EXPECT_THAT(r.device().runtime_kernels(), HasSubstr(GemvFormName(CurrentGemvForm())));
  // And the pool its decode step splits on, as tuned and kept
  // (model/work_split.h), and where its decode attention splits over
  // threads (model/attention.h).
  EXPECT_THAT(
      r.device().runtime_kernels(),
      HasSubstr(absl::StrCat(", decode thread pool ", ThreadPoolName(CurrentThreadPool()))));
  EXPECT_THAT(r.device().runtime_kernels(), HasSubstr(", decode attention "));
  // And who computed its prompt's products, as timed and kept for its runs
  // (model/prompt_gemm.h).
  EXPECT_THAT(r.device().runtime_kernels(),
              HasSubstr(std::string("prompt products ") +
                        (UseOwnPromptGemm() ? "hilnas's AVX-512 kernel" : "OpenBLAS")));
  if (GemvFormsHere().size() > 1) {
    EXPECT_THAT(r.device().runtime_kernels(), HasSubstr("medians of"));
  }
  SetGemvForm(GemvForm::kOneRow);
}

TEST(LibtorchRuntimeTest, RunsInBf16) {
  std::unique_ptr<Runtime> rt = NewLibtorchRuntime();
  BenchmarkRequest req = Request(1, 1, 1.0);
  req.set_precision(BF16);
  BenchmarkResult r = MeasureBenchmark(*rt, req, DeviceIdentity(), NoCooldown());
  ASSERT_EQ(r.failure(), FAILURE_NONE) << r.failure_message();
  EXPECT_EQ(r.request().precision(), BF16);
}

// Q4_0 weights: the device record names the blocks a prompt's quantized
// products ran in and the L2 that sized them (model/quant.h); float
// weights have no such blocks.
TEST(LibtorchRuntimeTest, Q4RunNamesItsPromptBlocks) {
  std::unique_ptr<Runtime> rt = NewLibtorchRuntime();
  BenchmarkRequest req = Request(1, 1, 1.0);
  req.set_precision(Q4_0);
  BenchmarkResult r = MeasureBenchmark(*rt, req, DeviceIdentity(), NoCooldown());
  ASSERT_EQ(r.failure(), FAILURE_NONE) << r.failure_message();
  EXPECT_THAT(r.device().runtime_kernels(),
              HasSubstr(", quantized prompt blocks " + PromptBlocksDescription()));
  BenchmarkResult f32 = MeasureBenchmark(*rt, Request(1, 1, 1.0), DeviceIdentity(), NoCooldown());
  ASSERT_EQ(f32.failure(), FAILURE_NONE) << f32.failure_message();
  EXPECT_THAT(f32.device().runtime_kernels(), Not(HasSubstr("quantized prompt blocks")));
}

TEST(LibtorchRuntimeTest, ModelLargerThanMemoryLimitIsOutOfMemory) {
  LibtorchRuntimeOptions o;
  o.memory_limit_bytes = 1000;  // the tiny model needs ~60 kB
  std::unique_ptr<Runtime> rt = NewLibtorchRuntime(o);
  BenchmarkResult r = MeasureBenchmark(*rt, Request(1, 1, 1.0), DeviceIdentity(), NoCooldown());
  EXPECT_EQ(r.failure(), OUT_OF_MEMORY);
  EXPECT_THAT(r.failure_message(), HasSubstr("device allows"));
}

TEST(LibtorchRuntimeTest, ImpossibleArchIsUnsupported) {
  std::unique_ptr<Runtime> rt = NewLibtorchRuntime();
  BenchmarkRequest req = Request(1, 1, 1.0);
  req.mutable_arch()->set_num_heads(3);  // 3 heads cannot share 2 KV heads
  BenchmarkResult r = MeasureBenchmark(*rt, req, DeviceIdentity(), NoCooldown());
  EXPECT_EQ(r.failure(), UNSUPPORTED_ARCH);
}

TEST(LibtorchRuntimeTest, MeasuresKvPredictionArchitectures) {
  // KVP-LP-0.5 of the tiny model: TTFT through the auxiliary prefill, the
  // predictor and one base step; decode on the base.
  std::unique_ptr<Runtime> rt = NewLibtorchRuntime();
  BenchmarkRequest req = Request(1, 1, 1.0);
  Arch a = TinyMixedArch();
  a.attention.assign(a.num_layers, Attention::kFull);
  a.kv_prediction.kind = KvPredictionSpec::Kind::kLayerPruned;
  a.kv_prediction.layer_pruned_ratio = 0.5;
  *req.mutable_arch() = ArchToProto(a);
  req.clear_prompt_lengths();
  req.add_prompt_lengths(16);
  BenchmarkResult r = MeasureBenchmark(*rt, req, DeviceIdentity(), NoCooldown());
  ASSERT_EQ(r.failure(), FAILURE_NONE) << r.failure_message();
  ASSERT_EQ(r.samples_size(), 1);
  EXPECT_GT(r.samples(0).ttft_ms(), 0);
  EXPECT_GT(r.samples(0).decode_ms_per_token(), 0);
  EXPECT_THAT(r.device().runtime_kernels(), HasSubstr("GEMV form"));
  SetGemvForm(GemvForm::kOneRow);
}

}  // namespace
}  // namespace hilnas
