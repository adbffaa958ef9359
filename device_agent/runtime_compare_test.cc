#include "device_agent/runtime_compare.h"

#include <ATen/Parallel.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "device_agent/external_runtime.h"
#include "device_agent/libtorch_runtime.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/attention.h"
#include "model/blas_core.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/gemv.h"
#include "model/prompt_gemm.h"
#include "model/test_archs.h"
#include "model/work_split.h"
#include "search_space/arch.h"

namespace hilnas {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

// Another runtime, its runs (prompt, decoded tokens) logged in order.
class LoggedRuntime : public Runtime {
 public:
  explicit LoggedRuntime(Runtime& inner) : inner_(inner) {}
  std::string name() const override { return inner_.name(); }
  std::string version() const override { return inner_.version(); }
  bool runs_in_process() const override { return inner_.runs_in_process(); }
  absl::StatusOr<std::unique_ptr<PreparedModel>> Prepare(const BenchmarkRequest& r) override {
    absl::StatusOr<std::unique_ptr<PreparedModel>> m = inner_.Prepare(r);
    if (!m.ok()) return m.status();
    return std::unique_ptr<PreparedModel>(new Logged(*std::move(m), r.threads(), &runs));
  }
  std::vector<std::string> runs;  // "threads/prompt/decode"

 private:
  class Logged : public PreparedModel {
   public:
    Logged(std::unique_ptr<PreparedModel> m, int threads, std::vector<std::string>* runs)
        : m_(std::move(m)), threads_(threads), runs_(runs) {}
    absl::StatusOr<RunTiming> Run(int prompt, int decode) override {
      runs_->push_back(absl::StrCat(threads_, "/", prompt, "/", decode));
      return m_->Run(prompt, decode);
    }

   private:
    std::unique_ptr<PreparedModel> m_;
    int threads_;
    std::vector<std::string>* runs_;
  };
  Runtime& inner_;
};

// A checkpoint both runtimes read, the built-in runtime, and llama-bench's
// stand-in (tests/fake_llama_bench: TTFT 0.1 ms a prompt token, 2 ms a
// decoded token, both divided by -t; it checks it got a GGUF file hilnas
// exported), copied into the test's own folder, where it logs its calls.
class RuntimeCompareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    threads_before_ = at::get_num_threads();
    work_ = ::testing::TempDir() + "/hilnas_compare_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(work_);
    std::filesystem::create_directories(work_ + "/bin");
    bench_ = work_ + "/bin/llama-bench";
    std::filesystem::copy_file(
        std::string(HILNAS_SOURCE_DIR) + "/tests/fake_llama_bench/llama-bench", bench_);
    Arch a = TinyMixedArch();
    a.attention.assign(a.num_layers, Attention::kFull);
    Decoder d = Decoder::Create(a, 1).value();
    ASSERT_TRUE(SaveCheckpoint(d, work_ + "/ckpt", StorageDtype::kF32).ok());
    req_.set_checkpoint_dir(work_ + "/ckpt");
    req_.set_threads(1);
  }
  void TearDown() override {
    at::set_num_threads(threads_before_);
    SetGemvForm(GemvForm::kOneRow);
    std::filesystem::remove_all(work_);
  }

  // llama.cpp as the agents run it, through `bench`.
  std::unique_ptr<Runtime> Llama(const std::string& bench) const {
    ExternalRuntimeOptions o;
    o.name = "llama.cpp";
    o.work_dir = work_ + "/llama";
    o.export_command = kBuiltinGgufExport;
    o.bench_command = bench +
                      " -m {model} -p {prompt_tokens} -n {decode_tokens} -d 0,{depth} "
                      "-t {threads} -r 1 -fa 0 -o json";
    return NewExternalRuntime(o);
  }
  // Two timed rounds of 4 decoded tokens against the stand-in at `threads`
  // (empty: the request's one), progress lines into lines_.
  absl::StatusOr<Comparison> Compare(std::vector<int> prompts, std::vector<int> threads) {
    std::unique_ptr<Runtime> llama = Llama(bench_);
    CompareOptions o;
    o.prompts = std::move(prompts);
    o.threads = std::move(threads);
    o.decode_tokens = 4;
    o.repeats = 2;
    o.progress = [this](const std::string& line) { lines_.push_back(line); };
    return CompareRuntimes(hilnas_runs_, *llama, req_, o);
  }
  std::string Calls() const {
    std::ifstream log(bench_ + ".log");
    return std::string(std::istreambuf_iterator<char>(log), std::istreambuf_iterator<char>());
  }

  int threads_before_ = 1;
  std::string work_, bench_;
  BenchmarkRequest req_;
  std::unique_ptr<Runtime> hilnas_ = NewLibtorchRuntime();
  LoggedRuntime hilnas_runs_{*hilnas_};  // hilnas_, its runs logged
  std::vector<std::string> lines_;
};

TEST_F(RuntimeCompareTest, RunsAlternateAndRowsAreMedians) {
  absl::StatusOr<Comparison> result = Compare({8, 16}, {});
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<std::string>& lines = lines_;
  EXPECT_EQ(hilnas_runs_.runs.size(), 6u);  // one thread count: no untimed runs between
  const std::vector<CompareRow>& rows = result->rows;
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_TRUE(result->scaling.empty());
  // A warm-up and two timed runs per runtime and prompt, alternating.
  ASSERT_EQ(lines.size(), 12u);
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_THAT(lines[i], HasSubstr(i % 2 == 0 ? "libtorch-cpu prompt" : "llama.cpp prompt"));
  }
  EXPECT_THAT(lines[0], HasSubstr("prompt 8 warm-up"));
  EXPECT_THAT(lines[11], HasSubstr("prompt 16 run 2"));
  EXPECT_EQ(rows[1].prompt, 16);
  EXPECT_DOUBLE_EQ(rows[1].second_ttft_ms, 1.6);
  EXPECT_DOUBLE_EQ(rows[1].second_decode_ms, 2.0);
  EXPECT_GT(rows[1].first_ttft_ms, 0);
  EXPECT_GT(rows[1].first_decode_ms, 0);

  const std::string table = CompareTable(rows, "hilnas", "llama.cpp");
  EXPECT_THAT(table, HasSubstr("| prompt | hilnas TTFT ms | llama.cpp TTFT ms | ratio |"));
  EXPECT_THAT(table, HasSubstr("| 16 | "));
  EXPECT_THAT(table, Not(HasSubstr("threads")));
}

// Issue 35 item 3 on a phone: both runtimes at each thread count in turn
// within a round, and what the threads give each. The stand-in divides its
// times by -t, so its gain from 1 to 2 threads is exactly 2.
TEST_F(RuntimeCompareTest, ThreadCountsTakeTurnsWithinEachRoundAndGainsArePaired) {
  absl::StatusOr<Comparison> result = Compare({8}, {1, 2});
  ASSERT_TRUE(result.ok()) << result.status();
  const std::vector<std::string>& lines = lines_;
  // Per round: hilnas and llama.cpp at 1 thread, then both at 2.
  ASSERT_EQ(lines.size(), 12u);
  EXPECT_THAT(lines[0], HasSubstr("libtorch-cpu prompt 8, 1 threads warm-up"));
  EXPECT_THAT(lines[1], HasSubstr("llama.cpp prompt 8, 1 threads warm-up"));
  EXPECT_THAT(lines[2], HasSubstr("libtorch-cpu prompt 8, 2 threads warm-up"));
  EXPECT_THAT(lines[4], HasSubstr("libtorch-cpu prompt 8, 1 threads run 1"));
  EXPECT_THAT(lines[11], HasSubstr("llama.cpp prompt 8, 2 threads run 2"));
  EXPECT_THAT(Calls(), HasSubstr("-p 8 -n 4 -d 0,8 -t 1 "));
  EXPECT_THAT(Calls(), HasSubstr("-p 8 -n 4 -d 0,8 -t 2 "));
  // The in-process runtime's threads change count every run: each timed
  // run follows an untimed prompt at its own count (llama-bench's process
  // warms up on its own).
  EXPECT_THAT(hilnas_runs_.runs, ElementsAre("1/8/4", "2/8/4", "1/8/1", "1/8/4", "2/8/1", "2/8/4",
                                             "1/8/1", "1/8/4", "2/8/1", "2/8/4"));

  ASSERT_EQ(result->rows.size(), 2u);
  EXPECT_EQ(result->rows[0].threads, 1);
  EXPECT_EQ(result->rows[1].threads, 2);
  EXPECT_DOUBLE_EQ(result->rows[0].second_ttft_ms, 0.8);
  EXPECT_DOUBLE_EQ(result->rows[1].second_ttft_ms, 0.4);
  ASSERT_EQ(result->scaling.size(), 1u);
  const ScalingRow& g = result->scaling[0];
  EXPECT_EQ(g.prompt, 8);
  EXPECT_EQ(g.from_threads, 1);
  EXPECT_EQ(g.to_threads, 2);
  EXPECT_DOUBLE_EQ(g.second_ttft_gain, 2.0);
  EXPECT_DOUBLE_EQ(g.second_decode_gain, 2.0);
  EXPECT_GT(g.first_ttft_gain, 0);
  EXPECT_GT(g.first_decode_gain, 0);

  EXPECT_THAT(CompareTable(result->rows, "hilnas", "llama.cpp"),
              HasSubstr("| prompt | threads | hilnas TTFT ms |"));
  const std::string scaling = ScalingTable(result->scaling, "hilnas", "llama.cpp");
  EXPECT_THAT(scaling, HasSubstr("| prompt | threads | hilnas TTFT gain | llama.cpp TTFT gain |"));
  EXPECT_THAT(scaling, HasSubstr("| 8 | 1 -> 2 | "));
  EXPECT_THAT(scaling, HasSubstr(" | 2.00x | "));

  // A thread count twice, or none, is refused before anything runs.
  lines_.clear();
  EXPECT_EQ(Compare({8}, {2, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Compare({8}, {0, 1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(lines_.empty());
}

// Models prepared at two thread counts in one process (a comparison's
// rounds): each run sets the process's intra-op threads, and the decode form,
// decode split and prompt product tuned at them, back to its own model's.
TEST_F(RuntimeCompareTest, APreparedModelRunsAtItsOwnThreadCount) {
  BenchmarkRequest req = req_;
  req.set_threads(1);
  absl::StatusOr<std::unique_ptr<PreparedModel>> one = hilnas_->Prepare(req);
  ASSERT_TRUE(one.ok()) << one.status();
  req.set_threads(2);
  absl::StatusOr<std::unique_ptr<PreparedModel>> two = hilnas_->Prepare(req);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(at::get_num_threads(), 2);  // the last Prepare's
  // And its decode form: another one set since is undone by the run.
  const std::string kernels = (*one)->kernels();  // "decode ..., GEMV form FORM (...)"
  const size_t at_form = kernels.find("GEMV form ");
  ASSERT_NE(at_form, std::string::npos) << kernels;
  const std::string form =
      kernels.substr(at_form + 10, kernels.find(' ', at_form + 10) - at_form - 10);
  for (GemvForm f : GemvFormsHere()) {
    if (form != GemvFormName(f)) SetGemvForm(f);
  }
  // Likewise where decode attention splits (model/attention.h): tuned on 2
  // threads by the second Prepare, kept as it was (nothing to split) by the
  // first.
  const double split_at_one = DecodeSplitWork();
  SetDecodeSplitWork(7);
  // And the pool its decode splits on (model/work_split.h): OpenMP for the
  // one-thread model (nothing splits), whatever the 2-thread one kept.
  EXPECT_THAT((*one)->kernels(), HasSubstr("decode thread pool openmp (one thread"));
  SetThreadPool(ThreadPool::kSpin);
  // And who computes its prompt's products (model/prompt_gemm.h): each
  // model's pick, as its kernels say, whatever was set since.
  auto prompt_pick = [](const std::string& kernels) -> std::optional<bool> {
    if (kernels.find("prompt products hilnas's AVX-512 kernel (own ") != std::string::npos) {
      return true;
    }
    if (kernels.find("prompt products OpenBLAS (own ") != std::string::npos) return false;
    return std::nullopt;  // nothing timed: no AVX-512F, or a choice named in the environment
  };
  const std::optional<bool> pick_one = prompt_pick((*one)->kernels());
  const std::optional<bool> pick_two = prompt_pick((*two)->kernels());
  if (OwnPromptGemmAvailable() && CurrentPromptGemmChoice() == PromptGemmChoice::kAuto &&
      OpenBlasThreads() > 0) {
    ASSERT_TRUE(pick_one && pick_two) << (*one)->kernels() << "\n" << (*two)->kernels();
  }
  const std::optional<bool> pick_before = AutoPromptGemm();
  SetAutoPromptGemm(pick_one ? std::optional<bool>(!*pick_one) : std::nullopt);
  ASSERT_TRUE((*one)->Run(8, 2).ok());
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_EQ(std::string(GemvFormName(CurrentGemvForm())), form);
  EXPECT_NE(DecodeSplitWork(), 7);
  EXPECT_EQ(CurrentThreadPool(), ThreadPool::kOpenMp);
  if (pick_one) {
    EXPECT_EQ(AutoPromptGemm(), pick_one);
  }
  if (pick_two) {
    SetAutoPromptGemm(!*pick_two);
    ASSERT_TRUE((*two)->Run(8, 2).ok());
    EXPECT_EQ(AutoPromptGemm(), pick_two);
  }
  SetAutoPromptGemm(pick_before);
  ASSERT_TRUE((*two)->Run(8, 2).ok());
  EXPECT_EQ(at::get_num_threads(), 2);
  EXPECT_NE(DecodeSplitWork(), 7);
  EXPECT_THAT((*two)->kernels(), HasSubstr("decode attention "));
  SetDecodeSplitWork(split_at_one);
}

TEST_F(RuntimeCompareTest, AFailingRuntimeIsNamed) {
  std::unique_ptr<Runtime> llama = Llama("echo broken >&2; false");
  CompareOptions o;
  o.prompts = {8};
  o.decode_tokens = 2;
  o.repeats = 1;
  absl::StatusOr<Comparison> result = CompareRuntimes(*hilnas_, *llama, req_, o);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.status().message(), HasSubstr("llama.cpp: "));
  o.repeats = 0;
  EXPECT_EQ(CompareRuntimes(*hilnas_, *llama, req_, o).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace hilnas
