#include "device_agent/runtime_compare.h"

#include <filesystem>

#include "device_agent/external_runtime.h"
#include "device_agent/libtorch_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/test_archs.h"
#include "search_space/arch.h"

namespace hilnas {
namespace {

using ::testing::HasSubstr;

// llama-bench's stand-in (tests/fake_llama_bench): TTFT 0.1 ms a prompt
// token, 2 ms a decoded token, from a GGUF file hilnas exported. Copied
// into `work` first: it logs its calls beside itself.
std::string FakeLlamaBench(const std::string& work) {
  std::filesystem::create_directories(work);
  const std::string to = work + "/llama-bench";
  std::filesystem::copy_file(std::string(HILNAS_SOURCE_DIR) + "/tests/fake_llama_bench/llama-bench",
                             to, std::filesystem::copy_options::overwrite_existing);
  return to;
}

std::unique_ptr<Runtime> FakeLlama(const std::string& work, const std::string& bench) {
  ExternalRuntimeOptions o;
  o.name = "llama.cpp";
  o.work_dir = work;
  o.export_command = kBuiltinGgufExport;
  o.bench_command = bench +
                    " -m {model} -p {prompt_tokens} -n {decode_tokens} -d 0,{depth} "
                    "-t {threads} -r 1 -fa 0 -o json";
  return NewExternalRuntime(o);
}

BenchmarkRequest OnCheckpoint(const std::string& dir) {
  Arch a = TinyMixedArch();
  a.attention.assign(a.num_layers, Attention::kFull);
  Decoder d = Decoder::Create(a, 1).value();
  EXPECT_TRUE(SaveCheckpoint(d, dir, StorageDtype::kF32).ok());
  BenchmarkRequest req;
  req.set_checkpoint_dir(dir);
  req.set_threads(1);
  return req;
}

TEST(RuntimeCompareTest, RunsAlternateAndRowsAreMedians) {
  const std::string work = ::testing::TempDir() + "/hilnas_compare";
  std::filesystem::remove_all(work);
  const BenchmarkRequest req = OnCheckpoint(work + "/ckpt");
  std::unique_ptr<Runtime> hilnas = NewLibtorchRuntime();
  std::unique_ptr<Runtime> llama = FakeLlama(work + "/llama", FakeLlamaBench(work + "/bin"));
  CompareOptions o;
  o.prompts = {8, 16};
  o.decode_tokens = 4;
  o.repeats = 2;
  std::vector<std::string> lines;
  o.progress = [&](const std::string& line) { lines.push_back(line); };
  absl::StatusOr<std::vector<CompareRow>> rows = CompareRuntimes(*hilnas, *llama, req, o);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->size(), 2u);
  // A warm-up and two timed runs per runtime and prompt, alternating.
  ASSERT_EQ(lines.size(), 12u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_THAT(lines[i], HasSubstr(i % 2 == 0 ? "libtorch-cpu prompt" : "llama.cpp prompt"));
  }
  EXPECT_THAT(lines[0], HasSubstr("prompt 8 warm-up"));
  EXPECT_THAT(lines[11], HasSubstr("prompt 16 run 2"));
  EXPECT_EQ((*rows)[1].prompt, 16);
  EXPECT_DOUBLE_EQ((*rows)[1].second_ttft_ms, 1.6);
  EXPECT_DOUBLE_EQ((*rows)[1].second_decode_ms, 2.0);
  EXPECT_GT((*rows)[1].first_ttft_ms, 0);
  EXPECT_GT((*rows)[1].first_decode_ms, 0);

  const std::string table = CompareTable(*rows, "hilnas", "llama.cpp");
  EXPECT_THAT(table, HasSubstr("| prompt | hilnas TTFT ms | llama.cpp TTFT ms | ratio |"));
  EXPECT_THAT(table, HasSubstr("| 16 | "));
  std::filesystem::remove_all(work);
}

TEST(RuntimeCompareTest, AFailingRuntimeIsNamed) {
  const std::string work = ::testing::TempDir() + "/hilnas_compare_fail";
  std::filesystem::remove_all(work);
  const BenchmarkRequest req = OnCheckpoint(work + "/ckpt");
  std::unique_ptr<Runtime> hilnas = NewLibtorchRuntime();
  std::unique_ptr<Runtime> llama = FakeLlama(work + "/llama", "echo broken >&2; false");
  CompareOptions o;
  o.prompts = {8};
  o.decode_tokens = 2;
  o.repeats = 1;
  absl::StatusOr<std::vector<CompareRow>> rows = CompareRuntimes(*hilnas, *llama, req, o);
  ASSERT_FALSE(rows.ok());
  EXPECT_THAT(rows.status().message(), HasSubstr("llama.cpp: "));
  o.repeats = 0;
  EXPECT_EQ(CompareRuntimes(*hilnas, *llama, req, o).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(work);
}

}  // namespace
}  // namespace hilnas
