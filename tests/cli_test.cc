// Runs the real `hilnas` binary as a separate process and checks what a user
// sees: exact counts, a generation with timings, clear errors for bad input.
#include <sched.h>
#include <sys/wait.h>

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/process.h"
#include "util/cpu_features.h"
#include "util/status_matchers.h"
#include "util/subprocess.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

// The JSON object `hilnas run` prints after "stats: ", or null.
nlohmann::json StatsLine(const std::string& output) {
  const size_t at = output.find("stats: ");
  if (at == std::string::npos) return nullptr;
  const size_t end = output.find('\n', at);
  return nlohmann::json::parse(output.substr(at + 7, end - at - 7), nullptr, false);
}

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

using Result = ::hilnas::testing::CommandResult;

Result Hilnas(const std::string& args) { return ::hilnas::testing::RunHilnas(args); }

std::string SourceDir() { return HILNAS_SOURCE_DIR; }

// `hilnas run` of configs/tiny-arch.textproto on one thread.
std::string TinyRun(int prompt_tokens, int new_tokens) {
  return absl::StrCat("run --arch ", SourceDir(), "/configs/tiny-arch.textproto --prompt-tokens ",
                      prompt_tokens, " --max-new-tokens ", new_tokens, " --threads 1");
}

// `args` run with one environment variable set to `value` (unset after).
Result HilnasWith(const char* variable, const char* value, const std::string& args) {
  ::setenv(variable, value, 1);
  Result r = Hilnas(args);
  ::unsetenv(variable);
  return r;
}

// OMP_PROC_BIND=true pinned the first thread to one CPU as the program
// started; the program hilnas runs anew for its timings kept that one CPU,
// and two threads timed one CPU as if it were two. A timing now says it
// turns the binding off and runs on every CPU it started with, as it does
// unbound.
TEST(CliTest, ATimingUndoesOpenMpsBindingToOneCpu) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  if (CPU_COUNT(&set) < 2) GTEST_SKIP() << "one CPU here: nothing to bind apart";
  const std::string all = CurrentCpuList();
  const std::string run = absl::StrCat("run --arch ", SourceDir(),
                                       "/configs/tiny-arch.textproto --prompt-tokens 16 "
                                       "--max-new-tokens 2 --threads 2");
  Result bound = HilnasWith("OMP_PROC_BIND", "true", run);
  Result plain = Hilnas(run);
  ASSERT_EQ(bound.exit_code, 0) << bound.output;
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_THAT(bound.output, HasSubstr("OpenMP's thread binding (OMP_PROC_BIND=true"));
  EXPECT_THAT(bound.output, HasSubstr("2 threads on CPUs " + all + ")"));
  EXPECT_THAT(bound.output, Not(HasSubstr("warning: 2 threads on 1 CPUs")));
  EXPECT_THAT(plain.output, HasSubstr("2 threads on CPUs " + all + ")"));
  EXPECT_THAT(plain.output, Not(HasSubstr("OpenMP's thread binding")));
  // Started on fewer CPUs than threads (taskset, a cgroup): said, as the
  // timings are a shared CPU's.
  cpu_set_t one;
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  Result pinned = Hilnas(run);
  ASSERT_EQ(sched_setaffinity(0, sizeof(set), &set), 0);
  ASSERT_EQ(pinned.exit_code, 0) << pinned.output;
  EXPECT_THAT(pinned.output, HasSubstr("warning: 2 threads on 1 CPUs"));
}

TEST(CliTest, ShapesShowPrintsTheExactFlash350mCount) {
  Result r = Hilnas("shapes show mobilellm-flash-350m");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("parameters: 394,613,632"));
  EXPECT_THAT(r.output, HasSubstr("FSFSFSFSFSFF"));
}

TEST(CliTest, ShapesListHasEveryFamily) {
  Result r = Hilnas("shapes list");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* name : {"mobilellm-pro-1b", "mobilellm-pro-shallow-1.8b", "mobilellm-flash-650m",
                           "mobilellm-flash-1.4b", "openelm-3b-kvp-c-270m"}) {
    EXPECT_THAT(r.output, HasSubstr(name));
  }
}

TEST(CliTest, ShapesShowPrintsTheKvPredictionMap) {
  Result r = Hilnas("shapes show openelm-1.1b-kvp-c-450m");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("0 0 1 1 2 2 3 3 4 4 5 5 6 6 7 7 8 9 10 11 12"));
}

TEST(CliTest, UnknownShapeIsAClearError) {
  Result r = Hilnas("shapes show mobilellm-flash-9b");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("no published shape named \"mobilellm-flash-9b\""));
}

TEST(CliTest, RunGeneratesAndReportsTtftAndDecodeSpeed) {
  Result r = Hilnas("run --arch " + SourceDir() +
                    "/configs/tiny-arch.textproto --prompt-tokens 64 --max-new-tokens 4 "
                    "--prefill-chunk 16 --threads 1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("prompt 64 tokens (prefill chunk 16): TTFT"));
  EXPECT_THAT(r.output, HasSubstr("tokens/s"));
  EXPECT_EQ(StatsLine(r.output).value("generated_tokens", 0), 4);
  // Before the runs, the decode kernel's forms were timed on the model and
  // the fastest kept (model/gemv.h TuneGemvForm).
  EXPECT_THAT(r.output, HasSubstr("decode GEMV form: "));
  // And where decode attention splits over threads (TuneDecodeSplit).
  EXPECT_THAT(r.output, HasSubstr("decode attention: "));
  if (KernelCpuFeatures().Avx2FmaF16c()) {
    EXPECT_THAT(r.output, HasSubstr("one-row "));
    EXPECT_THAT(r.output, HasSubstr("two-rows "));
    EXPECT_THAT(r.output, HasSubstr(" passes over "));
  }
}

// A Q4_0 run names its integer kernels and keeps every Q4_0 matrix with
// rows grouped eight at a time where the kernels read them so (x86 with
// AVX2, aarch64 with NEON: model/quant.h), none under the portable cap;
// float weights print no such line.
TEST(CliTest, RunKeepsQ4RowsGroupedWhereTheKernelsReadThem) {
  const std::string run = TinyRun(32, 2) + " --weight-dtype q4_0 --kv-dtype q8_0";
  Result q4 = Hilnas(run);
  Result portable = HilnasWith("HILNAS_CPU_FEATURES", "portable", run);
  Result f32 = Hilnas(TinyRun(32, 2));
  ASSERT_EQ(q4.exit_code, 0) << q4.output;
  ASSERT_EQ(portable.exit_code, 0) << portable.output;
  EXPECT_EQ(StatsLine(q4.output).value("generated_tokens", 0), 2);
  EXPECT_EQ(StatsLine(portable.output).value("generated_tokens", 0), 2);
  // tiny-arch: 6 layers, 4 with attention (q, k, v, o), each an MLP
  // (gate, up, down), and the tied embedding: 35 matrices, all of whole
  // groups of eight rows.
#if defined(__x86_64__)
  const bool grouped_here = KernelCpuFeatures().Avx2FmaF16c();
#else
  const bool grouped_here = KernelCpuFeatures().neon;
#endif
  if (grouped_here) {
    EXPECT_THAT(q4.output, HasSubstr("integer products; Q4_0 rows grouped eight at a time in 35 "
                                     "of 35 matrices"));
  }
  EXPECT_THAT(portable.output,
              HasSubstr("quantized products: portable integer products; Q4_0 rows grouped eight "
                        "at a time in 0 of 35 matrices"));
  EXPECT_THAT(f32.output, Not(HasSubstr("quantized products:")));
  // And the blocks a prompt's products run in, sized by this CPU's L2
  // (model/quant.h, util/cpu_caches.h).
  EXPECT_THAT(q4.output, HasSubstr("; a prompt's in blocks of "));
  EXPECT_THAT(q4.output, HasSubstr(" KiB of weights ("));
}

// OpenBLAS loaded with a core below the CPU's (as Debian 12's does on an
// Emerald Rapids host, where it falls back to Prescott) is pinned to the
// CPU's own by one re-execution (model/blas_core.h). OPENBLAS_CORETYPE=
// Prescott stands in for the fallback; HILNAS_BLAS_CORE=auto lets hilnas
// override it as it would OpenBLAS's own choice.
TEST(CliTest, RunPinsOpenBlasToTheCpusKernels) {
  const std::string run = TinyRun(32, 2);
  ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  Result kept = Hilnas(run);
  ::setenv("HILNAS_BLAS_CORE", "auto", 1);
  Result pinned = Hilnas(run);
  ::unsetenv("HILNAS_BLAS_CORE");
  ::unsetenv("OPENBLAS_CORETYPE");
  Result plain = Hilnas(run);
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  ASSERT_EQ(pinned.exit_code, 0) << pinned.output;
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_THAT(plain.output, HasSubstr("kernels: prompt matrix products OpenBLAS "));
  EXPECT_THAT(plain.output, Not(HasSubstr("below this CPU's")));
  EXPECT_EQ(StatsLine(pinned.output).value("generated_tokens", 0), 2);
  if (!KernelCpuFeatures().avx2 || !KernelCpuFeatures().fma) {
    GTEST_SKIP() << "no AVX2+FMA: Prescott is as good as OpenBLAS gets here";
  }
  // The user's choice is kept and reported as below the CPU's.
  EXPECT_THAT(kept.output, HasSubstr("prompt matrix products OpenBLAS Prescott (below this CPU's"));
  EXPECT_THAT(pinned.output, HasSubstr("(pinned by hilnas: OpenBLAS chose Prescott)"));
  EXPECT_THAT(pinned.output, Not(HasSubstr("OpenBLAS Prescott")));
  // Who computes the prompt's products is timed at every run (model/
  // prompt_gemm.h TunePromptGemm), so which side wins is the host's: on
  // a Zen 4 the two are level, and either may win the pinned or the plain
  // run. What must hold whatever wins: the kernels line names the product
  // the tuner kept.
  for (const Result* r : {&kept, &pinned, &plain}) {
    const bool own =
        r->output.find("prompt products: hilnas's AVX-512 kernel") != std::string::npos;
    EXPECT_EQ(own, r->output.find("computed by hilnas's AVX-512 kernel instead; decode") !=
                       std::string::npos)
        << r->output;
    if (!KernelCpuFeatures().avx512f) {
      EXPECT_FALSE(own) << r->output;
    }
  }
  // Named, the product is untimed: OpenBLAS, pinned to the CPU's core.
  ::setenv("HILNAS_BLAS_CORE", "auto", 1);
  ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  ::setenv("HILNAS_PROMPT_GEMM", "blas", 1);
  Result named = Hilnas(run);
  ::unsetenv("HILNAS_PROMPT_GEMM");
  ::unsetenv("HILNAS_BLAS_CORE");
  ::unsetenv("OPENBLAS_CORETYPE");
  ASSERT_EQ(named.exit_code, 0) << named.output;
  EXPECT_THAT(named.output, HasSubstr("(pinned by hilnas: OpenBLAS chose Prescott); decode"));
  // (Without AVX-512F the line says there was nothing to choose.)
  EXPECT_THAT(named.output, HasSubstr(KernelCpuFeatures().avx512f
                                          ? "prompt products: OpenBLAS (HILNAS_PROMPT_GEMM=blas)"
                                          : "prompt products: OpenBLAS (no AVX-512F"));
  EXPECT_THAT(named.output, Not(HasSubstr("hilnas's AVX-512")));
}

// HILNAS_CPU_FEATURES=avx2 runs what an AVX2-only CPU (AMD Zen 2/3)
// would: no AVX-512 kernel of hilnas's, OpenBLAS pinned to its Haswell
// kernels, and every line that names kernels says the features are capped.
// A value the build does not know is refused before anything runs.
TEST(CliTest, RunUnderAnAvx2CapUsesNoAvx512) {
#if !defined(__x86_64__)
  GTEST_SKIP() << "an x86-64 cap";
#else
  const std::string run = TinyRun(32, 2);
  Result bad = HilnasWith("HILNAS_CPU_FEATURES", "avx-512", run);
  Result capped = HilnasWith("HILNAS_CPU_FEATURES", "avx2", run);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("HILNAS_CPU_FEATURES=avx-512: not a cap this build knows"));
  EXPECT_THAT(bad.output, Not(HasSubstr("model:")));
  ASSERT_EQ(capped.exit_code, 0) << capped.output;
  EXPECT_EQ(StatsLine(capped.output).value("generated_tokens", 0), 2);
  EXPECT_THAT(capped.output, HasSubstr("features capped by HILNAS_CPU_FEATURES=avx2"));
  EXPECT_THAT(capped.output, Not(HasSubstr("four-rows")));
  EXPECT_THAT(capped.output, Not(HasSubstr("hilnas's AVX-512")));
  const CpuFeatures host = HostCpuFeatures();
  if (!host.avx512f) {
    EXPECT_THAT(capped.output, HasSubstr("(nothing of this CPU's dropped)"));
    return;
  }
  EXPECT_THAT(capped.output, HasSubstr("(not used: avx512f"));
  EXPECT_THAT(capped.output, HasSubstr("prompt products: OpenBLAS (no AVX-512F"));
  // The core OpenBLAS loads by itself is the host's (Cooperlake on a Zen 5,
  // Prescott on an Emerald Rapids under Debian 12), and some hosts set
  // OPENBLAS_CORETYPE=Haswell for every process (the failure this test
  // once had on a Zen 5). So the core is named: an AVX-512 one, too wide
  // for the cap. Kept as the user's choice, it is reported as wider than
  // the cap's; with HILNAS_BLAS_CORE=auto hilnas pins Haswell's and says
  // from what.
  const char* host_core = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = host_core == nullptr ? "" : host_core;
  ::setenv("HILNAS_CPU_FEATURES", "avx2", 1);
  ::setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  Result kept = Hilnas(run);
  Result pinned = HilnasWith("HILNAS_BLAS_CORE", "auto", run);
  ::unsetenv("HILNAS_CPU_FEATURES");
  if (host_core == nullptr) {
    ::unsetenv("OPENBLAS_CORETYPE");
  } else {
    ::setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  }
  ASSERT_EQ(kept.exit_code, 0) << kept.output;
  ASSERT_EQ(pinned.exit_code, 0) << pinned.output;
  EXPECT_THAT(kept.output, HasSubstr("prompt matrix products OpenBLAS SkylakeX (wider than the "
                                     "cap's Haswell: OPENBLAS_CORETYPE is set"));
  EXPECT_THAT(pinned.output, HasSubstr("prompt matrix products OpenBLAS Haswell (pinned by hilnas: "
                                       "OpenBLAS chose SkylakeX)"));
  EXPECT_THAT(pinned.output, Not(HasSubstr("hilnas's AVX-512")));
#endif
}

// On 2 threads `hilnas run` times both pools on the model's decode step
// and names the one it keeps, with both times; HILNAS_THREAD_POOL names it
// instead, and a value naming no pool stops the tool before a model is
// built.
TEST(CliTest, RunTimesTheThreadPoolsOrTakesTheNamedOne) {
  std::string run = TinyRun(32, 2);
  run.replace(run.find("--threads 1"), 11, "--threads 2");
  Result tuned = Hilnas(run);
  Result named = HilnasWith("HILNAS_THREAD_POOL", "spin", run);
  Result bad = HilnasWith("HILNAS_THREAD_POOL", "gomp", run);
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  EXPECT_THAT(tuned.output, ContainsRegex("decode thread pool: (openmp|spin) \\(a decode step "
                                          "[0-9.]+ ms on openmp, [0-9.]+ on spin"));
  EXPECT_EQ(StatsLine(tuned.output).value("generated_tokens", 0), 2);
  ASSERT_EQ(named.exit_code, 0) << named.output;
  EXPECT_THAT(named.output, HasSubstr("decode thread pool: spin (HILNAS_THREAD_POOL=spin)"));
  EXPECT_EQ(StatsLine(named.output).value("generated_tokens", 0), 2);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("HILNAS_THREAD_POOL=gomp is neither openmp nor spin"));
  EXPECT_THAT(bad.output, Not(HasSubstr("model:")));
}

TEST(CliTest, RunWarmsUpBeforeTheTimedGeneration) {
  const std::string run = TinyRun(24, 3);
  Result r = Hilnas(run + " --warmups 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("warm-up 1/2: TTFT"));
  EXPECT_THAT(r.output, HasSubstr("warm-up 2/2: TTFT"));
  // The timed generation is still the one the stats describe.
  const size_t timed = r.output.find("prompt 24 tokens");
  ASSERT_NE(timed, std::string::npos) << r.output;
  EXPECT_GT(timed, r.output.find("warm-up 2/2"));
  EXPECT_EQ(StatsLine(r.output).value("generated_tokens", 0), 3);
  Result bad = Hilnas(run + " --warmups 101");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.output, HasSubstr("--warmups"));
}

// --gemv-form names the decode kernel's form instead of timing them, and
// a name that is none of them fails before anything is built.
TEST(CliTest, RunTakesTheDecodeFormByName) {
  const std::string run = TinyRun(16, 2);
  if (KernelCpuFeatures().Avx2FmaF16c()) {
    Result named = Hilnas(run + " --gemv-form two-rows");
    ASSERT_EQ(named.exit_code, 0) << named.output;
    EXPECT_THAT(named.output, HasSubstr("decode GEMV form: two-rows (--gemv-form)"));
  }
  Result bad = Hilnas(run + " --gemv-form three-rows");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.output, HasSubstr("GEMV form 'three-rows' is none of"));
  EXPECT_THAT(bad.output, Not(HasSubstr("model:")));  // refused before the build
}

TEST(CliTest, MalformedArchFileNamesFileLineAndField) {
  const std::string path = ::testing::TempDir() + "/bad-arch.textproto";
  ASSERT_OK(WriteFileAtomically(path, "num_layers: 2\nd_modle: 64\n"));
  Result r = Hilnas("run --arch " + path);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr(path + ":2:"));
  EXPECT_THAT(r.output, HasSubstr("d_modle"));
}

TEST(CliTest, ImpossibleArchitectureIsRejectedWithTheRule) {
  const std::string path = ::testing::TempDir() + "/impossible.textproto";
  ASSERT_OK(WriteFileAtomically(path, R"pb(num_layers: 2
                                           d_model: 64
                                           d_ffn: 64
                                           num_heads: 4
                                           num_kv_heads: 3
                                           head_dim: 16
                                           vocab_size: 10
                                           rope_theta: 10000
                                           norm_eps: 1e-5
                                           attention: FULL
                                           attention: SKIP)pb"));
  Result r = Hilnas("run --arch " + path);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("num_kv_heads 3 does not divide num_heads 4"));
}

TEST(CliTest, CheckpointInitCheckAndRunFromIt) {
  const std::string dir = ::testing::TempDir() + "/cli_ckpt";
  std::filesystem::remove_all(dir);
  Result init = Hilnas("checkpoint init --arch " + SourceDir() +
                       "/configs/tiny-arch.textproto --dtype bf16 --out " + dir);
  ASSERT_EQ(init.exit_code, 0) << init.output;
  Result check = Hilnas("checkpoint check " + dir);
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_THAT(check.output, HasSubstr("pattern FWSFSF"));
  Result run = Hilnas("run --ckpt " + dir + " --prompt-tokens 8 --max-new-tokens 2");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  // A truncated weight file is reported, not loaded.
  std::string data;
  ASSERT_OK(ReadFileToString(dir + "/model.safetensors", &data));
  ASSERT_OK(WriteFileAtomically(dir + "/model.safetensors", data.substr(0, data.size() / 2)));
  Result bad = Hilnas("checkpoint check " + dir);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.output, HasSubstr("truncated"));
  std::filesystem::remove_all(dir);
}

TEST(CliTest, EvalMatchesTheTrainersLossAndGenerateWritesEnglish) {
  const std::string dir = ::testing::TempDir() + "/hilnas_cli_eval";
  std::filesystem::create_directories(dir);
  ASSERT_EQ(Hilnas("corpus --out " + dir + "/corpus.bin").exit_code, 0);
  const std::string backbone = std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone";
  // The trainer's held-out split and windows (eval scores the whole file by default).
  Result r = Hilnas("eval --ckpt " + backbone + " --tokens " + dir +
                    "/corpus.bin --threads 1 --heldout 0.05 --windows 64");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // train.json's final_heldout_loss was taken in f32 before the weights were
  // stored in bf16: the same windows give the same loss to bf16's rounding.
  std::string train;
  ASSERT_OK(ReadFileToString(backbone + "/train.json", &train));
  const double trained = nlohmann::json::parse(train)["final_heldout_loss"].get<double>();
  const size_t at = r.output.find("held-out loss ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const double loss = std::stod(r.output.substr(at + 14));
  EXPECT_NEAR(loss, trained, 2e-3) << r.output;
  EXPECT_THAT(r.output, HasSubstr("perplexity"));

  // As it ships: Q4_0 weights and a Q8_0 KV cache move the loss a little,
  // and the summary says which storage it is for.
  Result q = Hilnas("eval --ckpt " + backbone + " --tokens " + dir +
                    "/corpus.bin --threads 1 --heldout 0.05 --windows 64 --weight-dtype q4_0 "
                    "--kv-dtype q8_0");
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_THAT(q.output, HasSubstr("(q4_0 weights, q8_0 KV cache)"));
  const size_t qat = q.output.find("held-out loss ");
  ASSERT_NE(qat, std::string::npos) << q.output;
  const double quantized = std::stod(q.output.substr(qat + 14));
  EXPECT_NE(quantized, loss);
  EXPECT_NEAR(quantized, loss, 0.05) << q.output;
  EXPECT_NE(Hilnas("eval --ckpt " + backbone + " --tokens " + dir + "/corpus.bin --kv-dtype q4_0")
                .exit_code,
            0);

  r = Hilnas("generate --ckpt " + backbone + " --prompt 'The ' --max-new-tokens 40 --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The continuation is on stdout (the speed on stderr): the prompt, then
  // readable English: printable characters, mostly letters, real words.
  const size_t start = r.output.rfind("\nThe ") != std::string::npos ? r.output.rfind("\nThe ") + 1
                       : r.output.rfind("The ", 0) == 0              ? 0
                                                                     : std::string::npos;
  ASSERT_NE(start, std::string::npos) << r.output;
  const std::string text = r.output.substr(start, r.output.find('\n', start) - start);
  for (char c : text) EXPECT_TRUE(std::isprint(static_cast<unsigned char>(c))) << text;
  int letters = 0;
  for (char c : text) letters += std::isalpha(static_cast<unsigned char>(c)) != 0;
  EXPECT_GT(letters, 25) << text;
  EXPECT_THAT(text, ::testing::ContainsRegex(" (the|of|and|to|a|in|is|you|that|for) ")) << text;

  r = Hilnas("generate --ckpt " + backbone + " --prompt-ids 84,104,300");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("300"));
}

TEST(CliTest, SpaceShowAndSampleUseTheGivenSpace) {
  Result show = Hilnas("space show --space " + SourceDir() + "/configs/small-space.textproto");
  EXPECT_EQ(show.exit_code, 0) << show.output;
  EXPECT_THAT(show.output, HasSubstr("num_layers: 4 5 6 7 8"));
  Result sample = Hilnas("space sample --n 5 --seed 3 --space " + SourceDir() +
                         "/configs/small-space.textproto");
  EXPECT_EQ(sample.exit_code, 0) << sample.output;
  EXPECT_THAT(sample.output, HasSubstr("5 feasible of"));
  EXPECT_THAT(sample.output, Not(HasSubstr("SSS")));
}

// The latency model on the real measurements in bench/data/: evaluate with a
// plot, fit, predict, and refuse a model on a space it was not fitted on.
TEST(CliTest, LatencyEvalFitPredictOnRecordedMeasurements) {
  const std::string space = " --space " + SourceDir() + "/configs/latency-space.textproto";
  const std::string data = " --data " + SourceDir() + "/bench/data/latency-epyc-2t.csv";
  const std::string plot = ::testing::TempDir() + "/ttft.svg";
  Result eval =
      Hilnas("latency eval --metric ttft --folds 3 --restarts 1 --plot " + plot + space + data);
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_THAT(eval.output, HasSubstr("| GP (cross-validated) |"));
  EXPECT_THAT(eval.output, HasSubstr("| FLOPs |"));
  std::string svg;
  ASSERT_OK(ReadFileToString(plot, &svg));
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr("<circle"));

  const std::string model = ::testing::TempDir() + "/decode.model";
  Result fit = Hilnas("latency fit --metric decode --restarts 1 --out " + model + space + data);
  ASSERT_EQ(fit.exit_code, 0) << fit.output;
  const std::string arch = ::testing::TempDir() + "/latency-arch.textproto";
  ASSERT_OK(WriteFileAtomically(
      arch, R"pb(num_layers: 6
                 d_model: 512
                 d_ffn: 1024
                 num_heads: 8
                 num_kv_heads: 2
                 head_dim: 64
                 vocab_size: 8192
                 tie_embeddings: true
                 rope_theta: 10000
                 norm_eps: 1e-05
                 qk_norm: true
                 sliding_window: 128
                 attention: [ FULL, SLIDING_WINDOW, FULL, SKIP, FULL, FULL ])pb"));
  Result predict = Hilnas("latency predict --model " + model + " --arch " + arch + space);
  ASSERT_EQ(predict.exit_code, 0) << predict.output;
  EXPECT_THAT(predict.output, HasSubstr("ms (95% interval"));
  Result wrong_space = Hilnas("latency predict --model " + model + " --arch " + arch);
  EXPECT_EQ(wrong_space.exit_code, 1);
  EXPECT_THAT(wrong_space.output, HasSubstr("different search space"));

  // A second device (1 thread) on top of the first one's model.
  const std::string b_data = " --data " + SourceDir() + "/bench/data/latency-epyc-1t.csv";
  const std::string b_model = ::testing::TempDir() + "/decode-1t.model";
  Result transfer = Hilnas("latency fit --metric decode --restarts 1 --prior-model " + model +
                           " --out " + b_model + space + b_data);
  ASSERT_EQ(transfer.exit_code, 0) << transfer.output;
  EXPECT_THAT(transfer.output, HasSubstr("prior model: epyc-2t's decode prediction"));
  EXPECT_THAT(transfer.output, HasSubstr("log_ms_on_epyc-2t="));
  Result predict_b = Hilnas("latency predict --model " + b_model + " --arch " + arch + space);
  ASSERT_EQ(predict_b.exit_code, 0) << predict_b.output;
  EXPECT_THAT(predict_b.output, HasSubstr("on epyc-1t"));
  Result wrong_metric = Hilnas("latency fit --metric ttft --restarts 1 --prior-model " + model +
                               " --out " + b_model + space + b_data);
  EXPECT_EQ(wrong_metric.exit_code, 1);
  EXPECT_THAT(wrong_metric.output, HasSubstr("predicts decode, not ttft"));
}

// The pruning half of the search as a user runs it: corpus, train a small
// backbone, calibrate, prune with overrides, load the result; then the
// mistakes a user makes, each named.
TEST(CliTest, CorpusTrainCalibratePruneAndTheirErrors) {
  const std::string dir = ::testing::TempDir() + "/hilnas_cli_prune";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir + "/text");
  std::string text;
  for (int i = 0; i < 300; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  ASSERT_OK(WriteFileAtomically(dir + "/text/a.txt", text));
  Result corpus = Hilnas("corpus --sources " + dir + "/text --out " + dir + "/tokens.bin");
  ASSERT_EQ(corpus.exit_code, 0) << corpus.output;
  EXPECT_THAT(corpus.output, HasSubstr("13,502 byte tokens from 1 files"));
  ASSERT_OK(WriteFileAtomically(dir + "/arch.textproto", R"pb(
    name: "cli-backbone"
    num_layers: 4
    d_model: 64
    d_ffn: 128
    num_heads: 4
    num_kv_heads: 2
    head_dim: 16
    vocab_size: 256
    rope_theta: 10000
    norm_eps: 1e-5
    attention: [ FULL, FULL, FULL, FULL ])pb"));
  const std::string common = " --tokens " + dir + "/tokens.bin --batch-size 4 --seq-len 32 ";
  Result train = Hilnas("train --arch " + dir + "/arch.textproto --out " + dir + "/base" + common +
                        "--steps 30 --eval-every 10 --lr 1e-2");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_THAT(train.output, HasSubstr("step    30/30"));
  EXPECT_THAT(train.output, HasSubstr("of chance"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/base/train.json"));
  Result calib = Hilnas("calibrate --ckpt " + dir + "/base" + common);
  ASSERT_EQ(calib.exit_code, 0) << calib.output;
  EXPECT_THAT(calib.output, HasSubstr("(100%)"));
  EXPECT_THAT(calib.output, HasSubstr("metrics.json"));

  Result prune = Hilnas("prune --base " + dir + "/base --out " + dir +
                        "/small --layers 3 --d-model 32 --d-ffn 64 --pattern FWS --window 8 "
                        "--block-size 32");
  ASSERT_EQ(prune.exit_code, 0) << prune.output;
  EXPECT_THAT(prune.output, HasSubstr("3 layers"));
  EXPECT_THAT(prune.output, HasSubstr("d_model 32 of 64, d_ffn 64 of 128, pattern FWS"));
  Result check = Hilnas("checkpoint check " + dir + "/small");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  // Continued pretraining of the pruned model with distillation from the backbone.
  Result cpt = Hilnas("train --ckpt " + dir + "/small --out " + dir + "/small-cpt" + common +
                      "--steps 5 --distill-from " + dir + "/base --distill-weight 0.5");
  EXPECT_EQ(cpt.exit_code, 0) << cpt.output;
  EXPECT_THAT(cpt.output, HasSubstr("KD weight 0.50"));

  Result wide = Hilnas("prune --base " + dir + "/base --out " + dir + "/x --d-model 128");
  EXPECT_EQ(wide.exit_code, 1);
  EXPECT_THAT(wide.output, HasSubstr("d_model 128 is larger than the backbone's 64"));
  Result pattern =
      Hilnas("prune --base " + dir + "/base --out " + dir + "/x --layers 3 --pattern FF");
  EXPECT_EQ(pattern.exit_code, 1);
  EXPECT_THAT(pattern.output, HasSubstr("--pattern FF has 2 layers, want 3"));
  // Metrics of another backbone (the pruned one's shape differs; the CPT one
  // has the same shape as `small` but other weights).
  Result other = Hilnas("prune --base " + dir + "/small-cpt --metrics " + dir +
                        "/base/metrics.json --out " + dir + "/x");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_THAT(other.output, HasSubstr("base/metrics.json are for a 4-layer"));
  std::filesystem::copy_file(dir + "/base/metrics.json", dir + "/small/metrics.json");
  Result same_shape_copy = Hilnas("calibrate --ckpt " + dir + "/small-cpt" + common);
  ASSERT_EQ(same_shape_copy.exit_code, 0) << same_shape_copy.output;
  Result stale = Hilnas("prune --base " + dir + "/small --metrics " + dir +
                        "/small-cpt/metrics.json --out " + dir + "/x");
  EXPECT_EQ(stale.exit_code, 1);
  EXPECT_THAT(stale.output, HasSubstr("computed on another backbone"));
  // A truncated checkpoint is named.
  const std::string st = dir + "/small/model.safetensors";
  std::filesystem::resize_file(st, std::filesystem::file_size(st) / 2);
  Result truncated = Hilnas("prune --base " + dir + "/small --out " + dir + "/x");
  EXPECT_EQ(truncated.exit_code, 1);
  EXPECT_THAT(truncated.output, HasSubstr("model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/x"));
  std::filesystem::remove_all(dir);
}

// KV prediction as a user runs it on the demo backbone: prune a KVP-LP-0.5
// candidate (base + auxiliary/ + kv_predictor.safetensors), run it (TTFT
// through the auxiliary prefill), train its auxiliary and predictor with the
// base frozen, run the trained one.
TEST(CliTest, KvPredictionCandidatePruneRunTrain) {
  const std::string dir = ::testing::TempDir() + "/hilnas_cli_kvp";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ASSERT_OK(WriteFileAtomically(dir + "/kvp.textproto", R"(name: "demo-kvp-lp-0.5"
num_layers: 8 d_model: 256 d_ffn: 768 num_heads: 8 num_kv_heads: 2 head_dim: 32
vocab_size: 256 tie_embeddings: true rope_theta: 10000 norm_eps: 1e-05
attention: FULL attention: FULL attention: FULL attention: FULL
attention: FULL attention: FULL attention: FULL attention: FULL
kv_prediction { layer_pruned_ratio: 0.5 }
)"));
  Result prune = Hilnas("prune --base " + SourceDir() + "/data/demo-backbone --arch " + dir +
                        "/kvp.textproto --out " + dir + "/kvp");
  ASSERT_EQ(prune.exit_code, 0) << prune.output;
  EXPECT_THAT(prune.output, HasSubstr("KV-prediction candidate"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/kvp/auxiliary/model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/kvp/kv_predictor.safetensors"));
  Result run = Hilnas("run --ckpt " + dir + "/kvp --prompt-tokens 64 --max-new-tokens 4");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("KV prediction from an auxiliary model"));
  EXPECT_THAT(run.output, HasSubstr("TTFT"));
  Result corpus = Hilnas("corpus --sources /usr/share/common-licenses --out " + dir + "/t.bin");
  ASSERT_EQ(corpus.exit_code, 0) << corpus.output;
  Result train = Hilnas("train --ckpt " + dir + "/kvp --tokens " + dir +
                        "/t.bin --steps 3 --batch-size 2 --seq-len 32 --out " + dir + "/kvp2");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_THAT(train.output, HasSubstr("base frozen"));
  EXPECT_THAT(train.output, HasSubstr("held-out loss of the base over the predicted cache"));
  Result again = Hilnas("run --ckpt " + dir + "/kvp2 --prompt-tokens 64 --max-new-tokens 2");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  std::filesystem::remove_all(dir);
}

// Slim attention as a user runs it: refused on the GQA demo backbone, a
// multi-head checkpoint converted (report, greedy check), checked and run;
// the KV cache halves.
TEST(CliTest, SlimConvertsMultiHeadCheckpointsAndRefusesGqa) {
  const std::string dir = ::testing::TempDir() + "/hilnas_cli_slim";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Result gqa = Hilnas("slim --in " + SourceDir() + "/data/demo-backbone --out " + dir + "/x");
  EXPECT_EQ(gqa.exit_code, 1);
  EXPECT_THAT(gqa.output, HasSubstr("8 query heads share 2 key/value heads (GQA)"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/x"));
  Result init = Hilnas("checkpoint init --arch " + SourceDir() +
                       "/configs/demo-mha.textproto --out " + dir + "/mha");
  ASSERT_EQ(init.exit_code, 0) << init.output;
  Result slim = Hilnas("slim --in " + dir + "/mha --out " + dir + "/slim");
  ASSERT_EQ(slim.exit_code, 0) << slim.output;
  EXPECT_THAT(slim.output, HasSubstr("cond(W_K)"));
  EXPECT_THAT(slim.output, HasSubstr("greedy check: 64 of 64 tokens identical"));
  EXPECT_THAT(slim.output, HasSubstr("67,108,864 -> 33,554,432 bytes"));
  Result again = Hilnas("slim --in " + dir + "/mha --out " + dir + "/slim");
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_THAT(again.output, HasSubstr("exists and is not empty"));
  Result f16 = Hilnas("slim --in " + dir + "/mha --out " + dir + "/slim16 --dtype f16");
  EXPECT_EQ(f16.exit_code, 1);
  EXPECT_THAT(f16.output, HasSubstr("rounded to float16"));
  Result check = Hilnas("checkpoint check " + dir + "/slim");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  Result a = Hilnas("run --ckpt " + dir + "/mha --prompt-tokens 64 --max-new-tokens 4");
  Result b = Hilnas("run --ckpt " + dir + "/slim --prompt-tokens 64 --max-new-tokens 4");
  ASSERT_EQ(b.exit_code, 0) << b.output;
  EXPECT_EQ(StatsLine(a.output).value("kv_cache_bytes", 0), 1114112);  // 8 x 2 x 68 x 256 x 4
  EXPECT_EQ(StatsLine(b.output).value("kv_cache_bytes", 0), 557056);
  std::filesystem::remove_all(dir);
}

// `hilnas ppd` on the demo backbone: match rate, Theorem 4.1 and measured
// figures, identity with greedy; and the theorem's layer range.
TEST(CliTest, PpdReportsMatchRatePredictedAndMeasured) {
  const std::string dir = ::testing::TempDir() + "/hilnas_cli_ppd";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  Result corpus = Hilnas("corpus --sources /usr/share/common-licenses --out " + dir + "/t.bin");
  ASSERT_EQ(corpus.exit_code, 0) << corpus.output;
  const std::string base = "ppd --ckpt " + SourceDir() + "/data/demo-backbone --tokens " + dir +
                           "/t.bin --prompts 2 --prompt-tokens 64 --max-new-tokens 48";
  Result r = Hilnas(base + " --layer 5 --k 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("early prediction after layer 5, top-2 (3 compute units"));
  EXPECT_THAT(r.output, HasSubstr("p_correct: "));
  EXPECT_THAT(r.output, HasSubstr("PPD, Theorem 4.1"));
  EXPECT_THAT(r.output, HasSubstr("PPD (measured)"));
  EXPECT_THAT(r.output, HasSubstr("tokens identical to greedy decoding: yes (2 x 48)"));
  Result json = Hilnas(base + " --layer 7 --k 1 --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_THAT(json.output, HasSubstr("\"predicted_latency_ratio\""));
  Result low = Hilnas(base + " --layer 3 --k 1");
  EXPECT_EQ(low.exit_code, 1);
  EXPECT_THAT(low.output, HasSubstr("--layer 3 is outside [4, 7] for 8 layers"));
  // Without --tokens: the demo corpus, built in memory.
  Result no_text = Hilnas("ppd --ckpt " + SourceDir() +
                          "/data/demo-backbone --layer 4 --prompts 1 --prompt-tokens 32 "
                          "--max-new-tokens 16");
  EXPECT_EQ(no_text.exit_code, 0) << no_text.output;
  EXPECT_THAT(no_text.output, HasSubstr("the demo corpus (Debian English text)"));
  std::filesystem::remove_all(dir);
}

TEST(CliTest, UnknownCommandShowsUsage) {
  Result r = Hilnas("frobnicate");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("usage: hilnas COMMAND"));
}

}  // namespace
}  // namespace hilnas
