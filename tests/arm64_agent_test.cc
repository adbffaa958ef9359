// The aarch64 agent bundle (scripts/build-arm64) as a phone would run it:
// scripts/phone-agent drives a stand-in adb (tests/fake_adb/adb) whose
// "phone" is this machine under qemu-aarch64-static user-mode emulation. The
// bundled agent registers with a loopback coordinator (token-authenticated),
// completes a benchmark of a small architecture with skip and
// sliding-window layers, and reports an aarch64 device. Timings under
// emulation mean nothing and are not checked.
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/service.grpc.pb.h"
#include "tests/process.h"
#include "tests/tiny_job.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

using ::hilnas::testing::Process;
using ::hilnas::testing::WaitFor;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kBundle = std::string(HILNAS_SOURCE_DIR) + "/build/arm64/hilnas-agent-aarch64";
const std::string kToken = "arm64-test-token-5f3c9e";

std::chrono::system_clock::time_point In(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

// `command` through the shell, with its output; the exit code in `code`.
std::string Shell(const std::string& command, int* code) {
  std::string out;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

class Arm64AgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(std::filesystem::exists(kBundle + "/hilnas-agent"))
        << kBundle << " is missing: run scripts/build-arm64 (scripts/test does)";
    dir_ = ::testing::TempDir() + "/hilnas_arm64_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/phone/data/local/tmp");
    // The phone's cpufreq tree: CPU 1 is the big core.
    for (const auto& [cpu, khz] : {std::pair{0, "1800000"}, {1, "2850000"}}) {
      const std::string d =
          absl::StrCat(dir_, "/phone/sys/devices/system/cpu/cpu", cpu, "/cpufreq");
      std::filesystem::create_directories(d);
      std::ofstream(d + "/cpuinfo_max_freq") << khz << "\n";
    }
    std::ofstream(dir_ + "/token") << kToken;
    env_ = absl::StrCat("ADB=", HILNAS_SOURCE_DIR, "/tests/fake_adb/adb FAKE_ADB_ROOT=", dir_,
                        "/phone ");
    script_ = absl::StrCat(HILNAS_SOURCE_DIR, "/scripts/phone-agent fake-phone ");
  }
  void TearDown() override {
    int code = 0;
    Shell(env_ + script_ + "stop", &code);
  }

  std::unique_ptr<Process> StartCoordinator() {
    const std::string port_file = dir_ + "/port";
    // A tiny canary: the default one's 1024-token prompt takes over two
    // minutes under qemu.
    BenchmarkRequest canary = testing::TinyJob();
    canary.clear_prompt_lengths();
    canary.add_prompt_lengths(32);
    canary.set_repeats(2);
    canary.set_max_repeats(2);
    EXPECT_TRUE(WriteTextProtoFile(dir_ + "/canary.textproto", canary).ok());
    auto p = std::make_unique<Process>(
        std::vector<std::string>{"coordinator", "--listen=127.0.0.1:0", "--db=" + dir_ + "/c.db",
                                 "--port_file=" + port_file, "--token=" + kToken,
                                 "--lease_ttl_ms=60000", "--heartbeat_ms=1000",
                                 "--canary_request=" + dir_ + "/canary.textproto"},
        dir_ + "/coordinator.log");
    std::string text;
    EXPECT_TRUE(
        WaitFor([&] { return ReadFileToString(port_file, &text).ok() && !text.empty(); }, 30))
        << p->Log();
    EXPECT_TRUE(absl::SimpleAtoi(text, &port_));
    stub_ = UserService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
    return p;
  }

  std::string dir_, env_, script_;
  int port_ = 0;
  std::unique_ptr<UserService::Stub> stub_;
};

TEST_F(Arm64AgentTest, BundledAgentOnAnEmulatedPhoneRegistersAndCompletesABenchmark) {
  auto coordinator = StartCoordinator();
  int code = 0;
  const std::string started =
      Shell(absl::StrCat(env_, script_, "start --coordinator 127.0.0.1:", port_,
                         " --pools phones --token-file ", dir_, "/token"),
            &code);
  ASSERT_EQ(code, 0) << started;
  EXPECT_THAT(started, HasSubstr("CPUs 1, 1 threads"));  // the big core only
  EXPECT_THAT(Shell(env_ + script_ + "status", &code), HasSubstr("running"));

  // It registers (under emulation libtorch takes seconds to load).
  AgentInfo agent;
  ASSERT_TRUE(WaitFor(
      [&] {
        ListAgentsResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(In(5000));
        if (!stub_->ListAgents(&ctx, ListAgentsRequest(), &resp).ok()) return false;
        for (const AgentInfo& a : resp.agents()) {
          if (a.device().name() == "Fake-Phone-9") agent = a;
        }
        return agent.has_device();
      },
      120))
      << Shell(env_ + script_ + "log", &code) << coordinator->Log();
  EXPECT_THAT(agent.device().os(), HasSubstr("aarch64"));
  EXPECT_EQ(agent.device().cpu_set(), "1");
  EXPECT_THAT(agent.device().pools(), ::testing::ElementsAre("phones"));

  // A small architecture with FULL, SLIDING_WINDOW and SKIP layers.
  BenchmarkRequest job = testing::TinyJob();
  job.clear_prompt_lengths();
  job.add_prompt_lengths(48);
  job.set_repeats(2);
  job.set_max_repeats(2);
  job.set_warmup_runs(0);
  SubmitBenchmarkRequest req;
  *req.mutable_request() = job;
  req.set_pool("phones");
  SubmitBenchmarkResponse submitted;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(In(5000));
    ASSERT_TRUE(stub_->SubmitBenchmark(&ctx, req, &submitted).ok());
  }
  GetJobResponse done;
  ASSERT_TRUE(WaitFor(
      [&] {
        GetJobRequest get;
        get.set_job_id(submitted.job_id());
        get.set_wait_ms(5000);
        grpc::ClientContext ctx;
        ctx.set_deadline(In(10000));
        return stub_->GetJob(&ctx, get, &done).ok() &&
               (done.state() == JOB_DONE || done.state() == JOB_FAILED);
      },
      300))
      << Shell(env_ + script_ + "log", &code);
  ASSERT_EQ(done.state(), JOB_DONE) << done.result().failure_message();
  EXPECT_THAT(done.result().device().os(), HasSubstr("aarch64"));
  EXPECT_EQ(done.result().device().name(), "Fake-Phone-9");
  ASSERT_FALSE(done.result().summaries().empty());
  EXPECT_GT(done.result().summaries(0).ttft_median_ms(), 0);
  // The bundled agent timed the coordinator's canary before the job.
  ASSERT_TRUE(done.result().has_canary());
  EXPECT_GT(done.result().canary().ttft_ms(), 0);
  EXPECT_EQ(done.result().canary().request().prompt_lengths(0), 32);

  // The phone reached the coordinator through adb reverse; the token went
  // as a file, never on a command line.
  std::string reverse, adb_log;
  ASSERT_TRUE(ReadFileToString(dir_ + "/phone/reverse.log", &reverse).ok());
  EXPECT_THAT(reverse, HasSubstr(absl::StrCat("tcp:", port_, " tcp:", port_)));
  ASSERT_TRUE(ReadFileToString(dir_ + "/phone/adb.log", &adb_log).ok());
  EXPECT_THAT(adb_log, Not(HasSubstr(kToken)));

  EXPECT_THAT(Shell(env_ + script_ + "log", &code), HasSubstr("agent for 127.0.0.1:"));
  EXPECT_THAT(Shell(env_ + script_ + "stop", &code), HasSubstr("stopped"));
  EXPECT_THAT(Shell(env_ + script_ + "status", &code), HasSubstr("stopped"));
}

// The phone's kernels: the NEON GEMV (f32, f16, bf16) and the attention
// kernels on 4 threads, as the phone runs them, hold to a double reference,
// and the NEON GEMV to the portable loop's (its other forms to its own
// bits); under qemu, which executes the
// NEON instructions exactly as the architecture defines them.
TEST_F(Arm64AgentTest, NeonKernelsOnFourThreadsAgreeWithThePortablePath) {
  int code = 0;
  const std::string out = Shell(env_ + script_ + "check-kernels", &code);
  EXPECT_EQ(code, 0) << out;
  // qemu's CPU ("max") has the dot-product extension and the 8-bit matrix
  // multiply: the best quantized path is SMMLA for prompts (SDOT for one
  // token, a lone row or token), the baseline NEON without either, both
  // against the portable loop. Its rows of 7 tokens over 131 and 136 rows
  // take SMMLA's tiles of two token pairs, one pair, and SDOT's lone token
  // and row.
  EXPECT_THAT(out, HasSubstr("kernels: ok (gemv path neon, quantized path neon+i8mm, 4 threads"));
  for (const char* kernel :
       {"gemv Float 67x1027", "gemv Half 131x576", "gemv BFloat16 5x7",
        "attention decode window 48", "attention prefill full", "attention decode f16 cache",
        "attention decode f16 cache mha", "attention decode f16 cache, 1 KV head in chunks",
        "attention decode q8_0 cache", "attention decode q8_0 cache mha",
        "cache write f16 (c10::Half's bits)", "q8_0 activations (portable bytes)", "swiglu row",
        "geglu row", "q4_0 67x1024 x1", "q4_0 131x576 x7", "q8_0 5x32 x4", "q8_0 67x4096 x67",
        "q4_0 grouped 136x576 x7", "q4_0 grouped 72x4096 x67",
        // the NEON GEMV's other forms, each against the default form's bits
        "gemv Float 67x1027 form one-row-prefetch (one-row's bits)",
        "gemv Half 131x576 form two-rows (one-row's bits)",
        "gemv BFloat16 5x7 form four-rows (one-row's bits)"}) {
    EXPECT_THAT(out, HasSubstr(kernel));
  }
  EXPECT_THAT(out, Not(HasSubstr("OVER TOLERANCE")));
}

// HILNAS_CPU_FEATURES caps the arm64 kernels too (util/cpu_features.h),
// set on the phone by `phone-agent --cpu-features`: under `dotprod` the
// prompts' quantized products leave SMMLA for SDOT (an Armv8.2-8.5 phone,
// Cortex-A76/A78-class), under `neon` SDOT too for the baseline NEON path
// (Cortex-A53-class cores), under `portable` every kernel takes its
// portable loop, each still holding to the double reference. An x86 cap is
// refused by the script before anything is pushed, and by the agent.
TEST_F(Arm64AgentTest, CappedFeaturesTakeTheirPathsOnThePhone) {
  int code = 0;
  const std::string dotprod =
      Shell(env_ + script_ + "check-kernels --threads 2 --cpu-features dotprod", &code);
  EXPECT_EQ(code, 0) << dotprod;
  EXPECT_THAT(dotprod,
              HasSubstr("kernels: ok (gemv path neon, quantized path neon+dotprod, 2 threads"));
  EXPECT_THAT(dotprod,
              HasSubstr("features capped by HILNAS_CPU_FEATURES=dotprod (not used: i8mm)"));
  EXPECT_THAT(dotprod, HasSubstr("q4_0 grouped 136x576 x7"));
  EXPECT_THAT(dotprod, Not(HasSubstr("OVER TOLERANCE")));
  const std::string neon =
      Shell(env_ + script_ + "check-kernels --threads 2 --cpu-features neon", &code);
  EXPECT_EQ(code, 0) << neon;
  EXPECT_THAT(neon, HasSubstr("kernels: ok (gemv path neon, quantized path neon, 2 threads"));
  EXPECT_THAT(neon,
              HasSubstr("features capped by HILNAS_CPU_FEATURES=neon (not used: dotprod i8mm)"));
  const std::string portable =
      Shell(env_ + script_ + "check-kernels --threads 2 --cpu-features portable", &code);
  EXPECT_EQ(code, 0) << portable;
  EXPECT_THAT(portable,
              HasSubstr("kernels: ok (gemv path portable, quantized path portable, 2 threads"));
  const std::string refused = Shell(env_ + script_ + "check-kernels --cpu-features avx2", &code);
  EXPECT_NE(code, 0) << refused;
  EXPECT_THAT(refused, HasSubstr("--cpu-features avx2: not native, dotprod, neon or portable"));
  const std::string x86 = Shell(
      "HILNAS_CPU_FEATURES=avx2 HILNAS_AGENT_EMULATOR=qemu-aarch64-static "
      "sh " +
          kBundle + "/hilnas-agent --check-kernels --threads 2",
      &code);
  EXPECT_EQ(code, 2) << x86;
  EXPECT_THAT(x86, HasSubstr("HILNAS_CPU_FEATURES=avx2: not a cap this build knows"));
}

// One command compares hilnas with llama.cpp on the phone: the bundle and
// a llama.cpp folder pushed, the comparison run there on the big core, a
// table of ratios printed. llama-bench is a stand-in (no Android build of
// llama.cpp exists here) that checks it got a GGUF file and the flags.
TEST_F(Arm64AgentTest, CompareRunsBothRuntimesOnThePhoneInOneCommand) {
  const std::string llama = dir_ + "/llama-android";
  std::filesystem::create_directories(llama);
  std::filesystem::copy_file(std::string(HILNAS_SOURCE_DIR) + "/tests/fake_llama_bench/llama-bench",
                             llama + "/llama-bench");
  std::ofstream(dir_ + "/tiny.textproto")
      << "name: \"tiny\" num_layers: 2 d_model: 64 d_ffn: 128 num_heads: 4 num_kv_heads: 2\n"
         "head_dim: 16 vocab_size: 256 qk_norm: true rope_theta: 10000 norm_eps: 1e-5\n"
         "attention: FULL attention: FULL\n";
  int code = 0;
  const std::string out =
      Shell(absl::StrCat(env_, script_, "compare --llama-bench ", llama, " --arch ", dir_,
                         "/tiny.textproto --prompts 16,32 --repeats 1"),
            &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("tiny: f32 weights, f16 KV caches, 1 threads"));
  EXPECT_THAT(out, HasSubstr("| prompt | hilnas TTFT ms | llama.cpp TTFT ms | ratio |"));
  // The stand-in's times: 0.1 ms a prompt token, 2 ms a decoded token.
  EXPECT_THAT(out, HasSubstr("| 16 | "));
  EXPECT_THAT(out, HasSubstr(" | 1.6 | "));
  EXPECT_THAT(out, HasSubstr(" | 3.2 | "));
  EXPECT_THAT(out, HasSubstr(" | 2.00 | "));
  // On the big core (CPU 1) with one thread; decode timed after each prompt.
  std::string calls;
  ASSERT_TRUE(
      ReadFileToString(dir_ + "/phone/data/local/tmp/hilnas/llama/llama-bench.log", &calls).ok());
  EXPECT_THAT(calls, HasSubstr("-p 32 -n 64 -d 0,32 -t 1 -fa 0 -ctk f16 -ctv f16 -o json"));
  // --scaling: both runtimes on 1 and then 2 threads each round, and what
  // the threads give each (the stand-in's times halve on 2 threads); here
  // with Q4_0 weights and Q8_0 caches on both sides (heads of 32: whole
  // cache blocks).
  std::ofstream(dir_ + "/tiny32.textproto")
      << "name: \"tiny32\" num_layers: 2 d_model: 64 d_ffn: 128 num_heads: 2 num_kv_heads: 1\n"
         "head_dim: 32 vocab_size: 256 qk_norm: true rope_theta: 10000 norm_eps: 1e-5\n"
         "attention: FULL attention: FULL\n";
  const std::string scaled =
      Shell(absl::StrCat(env_, script_, "compare --llama-bench ", llama, " --arch ", dir_,
                         "/tiny32.textproto --prompts 16 --repeats 1 --scaling 1,2 --dtype q4_0 "
                         "--kv-dtype q8_0"),
            &code);
  ASSERT_EQ(code, 0) << scaled;
  EXPECT_THAT(scaled, HasSubstr("tiny32: q4_0 weights, q8_0 KV caches, 1,2 threads"));
  EXPECT_THAT(scaled, HasSubstr("| prompt | threads | hilnas TTFT ms |"));
  EXPECT_THAT(scaled, HasSubstr("| 16 | 1 -> 2 | "));
  EXPECT_THAT(scaled, HasSubstr(" | 2.00x | "));
  ASSERT_TRUE(
      ReadFileToString(dir_ + "/phone/data/local/tmp/hilnas/llama/llama-bench.log", &calls).ok());
  EXPECT_THAT(calls, HasSubstr("-p 16 -n 64 -d 0,16 -t 2 -fa 1 -ctk q8_0 -ctv q8_0 -o json"));
  EXPECT_THAT(
      Shell(absl::StrCat(env_, script_, "compare --llama-bench ", llama, " --scaling 4"), &code),
      HasSubstr("--scaling 4: not a list of two or more thread counts"));
  EXPECT_NE(code, 0);
  // Bad input is refused before anything is pushed.
  EXPECT_THAT(Shell(env_ + script_ + "compare", &code), HasSubstr("compare needs --llama-bench"));
  EXPECT_NE(code, 0);
}

// One command prices a window layer against a full one on the phone: the
// bundle pushed, the four variants timed there in rounds on the big core,
// the tables printed (figures under qemu mean nothing; the mechanism does).
TEST_F(Arm64AgentTest, PriceWindowsRunsTheFourVariantsOnThePhoneInOneCommand) {
  std::ofstream(dir_ + "/tiny-window.textproto")
      << "name: \"tiny-window\" num_layers: 3 d_model: 64 d_ffn: 128 num_heads: 2\n"
         "num_kv_heads: 1 head_dim: 32 vocab_size: 256 qk_norm: true rope_theta: 10000\n"
         "norm_eps: 1e-5 sliding_window: 8 attention: FULL attention: FULL attention: FULL\n";
  int code = 0;
  const std::string out =
      Shell(absl::StrCat(env_, script_, "price-windows --arch ", dir_,
                         "/tiny-window.textproto --prompt 32 --rounds 1 --dtype q4_0 "
                         "--kv-dtype q8_0"),
            &code);
  ASSERT_EQ(code, 0) << out;
  EXPECT_THAT(out, HasSubstr("tiny-window: prompt 32, window 8, q4_0 weights, q8_0 KV cache, "
                             "1 thread"));
  EXPECT_THAT(out, HasSubstr("| mixed | F W F |"));
  EXPECT_THAT(out, HasSubstr("| all-skip | K K K | "));
  EXPECT_THAT(out, HasSubstr("| attention kernels in the model (all-window / all-full) | "));
  EXPECT_THAT(Shell(absl::StrCat(env_, script_, "price-windows --prompt many"), &code),
              HasSubstr("--prompt many: not a number"));
  EXPECT_NE(code, 0);
}

TEST_F(Arm64AgentTest, PhoneAgentRefusesAPhoneThatIsNotArm64OrNotThere) {
  int code = 0;
  std::string out = Shell(
      absl::StrCat("FAKE_ADB_ABI=x86_64 ", env_, script_, "start --coordinator 127.0.0.1:50051"),
      &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(out, HasSubstr("CPU ABI \"x86_64\""));
  out = Shell(absl::StrCat(env_, HILNAS_SOURCE_DIR,
                           "/scripts/phone-agent other-serial start --coordinator 127.0.0.1:1"),
              &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(out, HasSubstr("other-serial: adb says"));
  out = Shell(absl::StrCat(env_, script_, "start"), &code);
  EXPECT_NE(code, 0);
  EXPECT_THAT(out, HasSubstr("start needs --coordinator"));
}

}  // namespace
}  // namespace hilnas
