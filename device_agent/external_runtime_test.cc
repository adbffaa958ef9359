#include "device_agent/external_runtime.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "device_agent/protocol.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/test_archs.h"
#include "search_space/arch.h"
#include "util/status_matchers.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

const std::string kData = std::string(HILNAS_SOURCE_DIR) + "/device_agent/testdata/";

std::string Read(const std::string& name) {
  std::string out;
  const absl::Status s = ReadFileToString(kData + name, &out);
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

// One prompt length of 1024 tokens, 32 decode tokens, `runs` timed runs.
BenchmarkRequest OnePrompt(int runs) {
  BenchmarkRequest req;
  req.add_prompt_lengths(1024);
  req.set_decode_tokens(32);
  req.set_repeats(runs);
  req.set_max_repeats(runs);
  return req;
}

BenchmarkResult Measure(Runtime& rt, const BenchmarkRequest& req) {
  ProtocolOptions po;
  po.cooldown_ms = 0;
  return MeasureBenchmark(rt, req, DeviceIdentity(), po);
}

TEST(LlamaBenchParserTest, PromptTestGivesTtftAndGenTestGivesDecode) {
  ASSERT_OK_AND_ASSIGN(RunTiming t, ParseLlamaBenchOutput(Read("llama_bench.json"), 1024, 32));
  EXPECT_NEAR(t.ttft_ms, 1843.211, 1e-9);
  EXPECT_NEAR(t.decode_ms_per_token, 1520.0 / 32, 1e-9);
  EXPECT_EQ(t.decode_tokens, 32);
}

TEST(LlamaBenchParserTest, AcceptsJsonLines) {
  const std::string jsonl =
      "{\"n_prompt\": 256, \"n_gen\": 0, \"avg_ns\": 4000000}\n"
      "{\"n_prompt\": 0, \"n_gen\": 8, \"avg_ns\": 80000000}\n";
  ASSERT_OK_AND_ASSIGN(RunTiming t, ParseLlamaBenchOutput(jsonl, 256, 8));
  EXPECT_DOUBLE_EQ(t.ttft_ms, 4.0);
  EXPECT_DOUBLE_EQ(t.decode_ms_per_token, 10.0);
}

TEST(LlamaBenchParserTest, WrongTokenCountsOrMissingTestsAreErrors) {
  EXPECT_THAT(ParseLlamaBenchOutput(Read("llama_bench.json"), 2048, 32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n_prompt 1024")));
  EXPECT_THAT(ParseLlamaBenchOutput("[{\"n_prompt\": 0, \"n_gen\": 32, \"avg_ns\": 5}]", 1024, 32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no prompt-processing")));
  EXPECT_THAT(ParseLlamaBenchOutput("error: failed to load model", 1024, 32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("neither a JSON array")));
}

TEST(ExecuTorchParserTest, StatsLineGivesTtftAndDecode) {
  ASSERT_OK_AND_ASSIGN(RunTiming t, ParseExecuTorchOutput(Read("executorch_runner.txt")));
  EXPECT_DOUBLE_EQ(t.ttft_ms, 1380.0);  // first_token_ms - inference_start_ms
  EXPECT_EQ(t.decode_tokens, 31);
  EXPECT_DOUBLE_EQ(t.decode_ms_per_token, (1732098004100.0 - 1732098002910.0) / 31);
}

TEST(ExecuTorchParserTest, MissingOrInconsistentStatsAreErrors) {
  EXPECT_THAT(ParseExecuTorchOutput("Segmentation fault"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no \"PyTorchObserver\"")));
  EXPECT_THAT(
      ParseExecuTorchOutput("PyTorchObserver {\"inference_start_ms\":10,\"first_token_ms\":5,"
                            "\"inference_end_ms\":20,\"generated_tokens\":3}"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("consistent")));
}

TEST(ExpandCommandTest, FillsPlaceholdersAndRejectsUnknownOnes) {
  ASSERT_OK_AND_ASSIGN(std::string c, ExpandCommand("bench -m {model} -p {prompt_tokens}",
                                                    {{"model", "/m"}, {"prompt_tokens", "8"}}));
  EXPECT_EQ(c, "bench -m /m -p 8");
  EXPECT_THAT(ExpandCommand("bench {oops}", {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("{oops}")));
}

TEST(RunShellCommandTest, CapturesOutputReportsExitCodeAndTimesOut) {
  ASSERT_OK_AND_ASSIGN(std::string out, RunShellCommand("echo hello; echo noise >&2", 10));
  EXPECT_EQ(out, "hello\n");
  EXPECT_THAT(RunShellCommand("echo bad >&2; exit 3", 10),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("exited with 3")));
  EXPECT_THAT(RunShellCommand("sleep 30", 0.3),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("timed out")));
}

// The whole external path in real processes: an "export" command that
// records its config and a "bench" command that replays recorded
// llama-bench output, as adb would relay it from a phone.
TEST(ExternalRuntimeTest, DrivesExportAndBenchCommandsThroughTheProtocol) {
  const std::string work = ::testing::TempDir() + "/hilnas_external";
  std::filesystem::remove_all(work);
  ExternalRuntimeOptions o;
  o.name = "llama.cpp";
  o.version = "b4521";
  o.format = ExternalFormat::kLlamaBench;
  o.work_dir = work;
  o.export_command = "cp {config} {model}";
  o.bench_command = absl::StrCat("test -s {model} && test {prompt_tokens} = 1024 && cat ", kData,
                                 "llama_bench.json");
  std::unique_ptr<Runtime> rt = NewExternalRuntime(o);
  BenchmarkRequest req = OnePrompt(2);
  *req.mutable_arch() = ArchToProto(TinyMixedArch());
  BenchmarkResult r = Measure(*rt, req);
  ASSERT_EQ(r.failure(), FAILURE_NONE) << r.failure_message();
  EXPECT_EQ(r.samples_size(), 2);
  EXPECT_NEAR(r.summaries(0).ttft_median_ms(), 1843.211, 1e-9);
  EXPECT_EQ(r.device().runtime(), "llama.cpp");
  // The version llama-bench printed, not the one configured.
  EXPECT_EQ(r.device().runtime_version(), "b4521 (b4f2c0a1)");
  // Memory is the bench process's (a shell and cat, a few MB, or 0 when
  // it ended before the first sample), never the agent's (this test
  // process, libtorch loaded).
  EXPECT_LT(r.peak_rss_bytes(), 32 << 20);
}

TEST(LlamaBenchParserTest, DecodeIsTakenAtThePromptsDepth) {
  const std::string jsonl =
      "{\"build_number\": 7100, \"build_commit\": \"10e9780\", \"n_prompt\": 512, \"n_gen\": 0, "
      "\"n_depth\": 0, \"avg_ns\": 4000000}\n"
      "{\"n_prompt\": 0, \"n_gen\": 8, \"n_depth\": 0, \"avg_ns\": 40000000}\n"
      "{\"n_prompt\": 512, \"n_gen\": 0, \"n_depth\": 512, \"avg_ns\": 9000000}\n"
      "{\"n_prompt\": 0, \"n_gen\": 8, \"n_depth\": 512, \"avg_ns\": 80000000}\n";
  ASSERT_OK_AND_ASSIGN(RunTiming t, ParseLlamaBenchOutput(jsonl, 512, 8));
  EXPECT_DOUBLE_EQ(t.ttft_ms, 4.0);               // the prompt on an empty cache
  EXPECT_DOUBLE_EQ(t.decode_ms_per_token, 10.0);  // after 512 tokens, not 5.0 at depth 0
  EXPECT_EQ(t.reported_version, "b7100 (10e9780)");
  const std::string shallow =
      "{\"n_prompt\": 512, \"n_gen\": 0, \"n_depth\": 0, \"avg_ns\": 4000000}\n"
      "{\"n_prompt\": 0, \"n_gen\": 8, \"n_depth\": 0, \"avg_ns\": 40000000}\n";
  EXPECT_THAT(ParseLlamaBenchOutput(shallow, 512, 8),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no generation (tg) test at depth 512 (only at depth 0)")));
}

TEST(ExternalRuntimeTest, PeakMemoryIsTheBenchProcesses) {
  const std::string work = ::testing::TempDir() + "/hilnas_external_rss";
  std::filesystem::remove_all(work);
  ExternalRuntimeOptions o;
  o.work_dir = work;
  // The shell holds a 64 MiB string for a second (memory is sampled at
  // most every 500 ms), then prints the recorded output.
  o.bench_command = absl::StrCat(
      "x=$(head -c 67108864 /dev/zero | tr '\\0' a); sleep 1; test ${#x} -gt 0 && cat ", kData,
      "llama_bench.json");
  std::unique_ptr<Runtime> rt = NewExternalRuntime(o);
  BenchmarkRequest req = OnePrompt(1);
  req.set_checkpoint_dir(work);
  BenchmarkResult r = Measure(*rt, req);
  ASSERT_EQ(r.failure(), FAILURE_NONE) << r.failure_message();
  EXPECT_GE(r.samples(0).peak_rss_bytes(), 64 << 20);
  EXPECT_EQ(r.peak_rss_bytes(), r.samples(0).peak_rss_bytes());
}

// --export-command builtin:gguf: hilnas writes the GGUF file llama-bench
// reads; what llama.cpp cannot run is an unsupported architecture.
TEST(ExternalRuntimeTest, BuiltinGgufExportFeedsTheBenchCommand) {
  const std::string work = ::testing::TempDir() + "/hilnas_external_gguf";
  std::filesystem::remove_all(work);
  ExternalRuntimeOptions o;
  o.work_dir = work;
  o.export_command = kBuiltinGgufExport;
  o.bench_command =
      absl::StrCat("test \"$(head -c 4 {model})\" = GGUF && cat ", kData, "llama_bench.json");
  std::unique_ptr<Runtime> rt = NewExternalRuntime(o);
  Arch full = TinyMixedArch();
  full.attention.assign(4, Attention::kFull);
  BenchmarkRequest req = OnePrompt(1);
  *req.mutable_arch() = ArchToProto(full);
  req.set_precision(FP16);
  BenchmarkResult r = Measure(*rt, req);
  ASSERT_EQ(r.failure(), FAILURE_NONE) << r.failure_message();

  // A checkpoint on the device, exported into a work folder of its own.
  const std::string ckpt = work + "-ckpt";
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(full, 3));
  ASSERT_OK(SaveCheckpoint(d, ckpt, StorageDtype::kF32));
  BenchmarkRequest from_ckpt = OnePrompt(1);
  from_ckpt.set_checkpoint_dir(ckpt);
  r = Measure(*rt, from_ckpt);
  EXPECT_EQ(r.failure(), FAILURE_NONE) << r.failure_message();
  std::filesystem::remove_all(ckpt);

  *req.mutable_arch() = ArchToProto(TinyMixedArch());  // SWA and skip layers
  r = Measure(*rt, req);
  EXPECT_EQ(r.failure(), UNSUPPORTED_ARCH);
  EXPECT_THAT(r.failure_message(), HasSubstr("layer 1 has swa attention"));
}

// The comparison's scaling rounds prepare one model per thread count: the
// export runs once for them, and again when its input or output changed.
TEST(ExternalRuntimeTest, SameModelAtAnotherThreadCountReusesTheExport) {
  const std::string work = ::testing::TempDir() + "/hilnas_external_reuse";
  std::filesystem::remove_all(work);
  std::filesystem::create_directories(work);
  const std::string log = work + "/exports.log";
  ExternalRuntimeOptions o;
  o.work_dir = work;
  o.export_command = absl::StrCat("echo {precision} >> ", log, " && cp {config} {model}");
  o.bench_command = absl::StrCat("test -s {model} && cat ", kData, "llama_bench.json");
  std::unique_ptr<Runtime> rt = NewExternalRuntime(o);
  auto exports = [&] {
    std::string text;
    EXPECT_OK(ReadFileToString(log, &text));
    return std::count(text.begin(), text.end(), '\n');
  };
  BenchmarkRequest req = OnePrompt(1);
  *req.mutable_arch() = ArchToProto(TinyMixedArch());
  std::string model;
  for (int threads : {1, 2, 4}) {
    req.set_threads(threads);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<PreparedModel> m, rt->Prepare(req));
    EXPECT_OK(m->Run(1024, 32).status());
  }
  EXPECT_EQ(exports(), 1);
  req.set_precision(FP16);  // another file
  ASSERT_OK(rt->Prepare(req).status());
  EXPECT_EQ(exports(), 2);
  ASSERT_OK(rt->Prepare(req).status());
  EXPECT_EQ(exports(), 2);
  // The exported file gone or changed: exported again.
  for (const auto& e : std::filesystem::recursive_directory_iterator(work)) {
    if (e.path().filename() == "model.fp16") model = e.path().string();
  }
  ASSERT_FALSE(model.empty());
  std::filesystem::remove(model);
  ASSERT_OK(rt->Prepare(req).status());
  EXPECT_EQ(exports(), 3);
  ASSERT_OK(WriteFileAtomically(model, "{}"));
  ASSERT_OK(rt->Prepare(req).status());
  EXPECT_EQ(exports(), 4);

  // From a checkpoint: exported again when the checkpoint's files change.
  const std::string ckpt = work + "/ckpt";
  std::filesystem::create_directories(ckpt);
  ASSERT_OK(WriteFileAtomically(ckpt + "/config.json", "{}"));
  ASSERT_OK(WriteFileAtomically(ckpt + "/model.bin", "weights"));
  BenchmarkRequest from_ckpt = OnePrompt(1);
  from_ckpt.set_checkpoint_dir(ckpt);
  ASSERT_OK(rt->Prepare(from_ckpt).status());
  ASSERT_OK(rt->Prepare(from_ckpt).status());
  EXPECT_EQ(exports(), 5);
  ASSERT_OK(WriteFileAtomically(ckpt + "/model.bin", "other weights"));
  ASSERT_OK(rt->Prepare(from_ckpt).status());
  EXPECT_EQ(exports(), 6);
}

TEST(ExternalRuntimeTest, FailingExportIsUnsupportedArch) {
  ExternalRuntimeOptions o;
  o.work_dir = ::testing::TempDir() + "/hilnas_external_fail";
  o.export_command = "echo 'cannot lower skip layers' >&2; exit 1";
  o.bench_command = "true";
  std::unique_ptr<Runtime> rt = NewExternalRuntime(o);
  BenchmarkRequest req;
  *req.mutable_arch() = ArchToProto(TinyMixedArch());
  req.add_prompt_lengths(8);
  ProtocolOptions po;
  po.cooldown_ms = 0;
  BenchmarkResult r = MeasureBenchmark(*rt, req, DeviceIdentity(), po);
  EXPECT_EQ(r.failure(), UNSUPPORTED_ARCH);
  EXPECT_THAT(r.failure_message(), HasSubstr("cannot lower skip layers"));
}

}  // namespace
}  // namespace hilnas
