// Bad input, tried as a hostile or careless user would, through the real
// `hilnas` binary: every example of issue 17 (and one more of each class)
// ends in a clear error naming the file, field or value, with exit code 1,
// no signal, no hang, and nothing already stored lost.
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/process.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using Result = ::hilnas::testing::CommandResult;

// A hang is killed after 120 s (exit 137), and fails the check below.
Result Hilnas(const std::string& args) { return ::hilnas::testing::RunHilnas(args, 120); }

// A clean failure: exit code 1 (not an abort, a signal or a timeout) and a
// message containing `what`.
void ExpectCleanError(const Result& r, const std::string& what) {
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(what));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("terminate called")));
}

std::string Slurp(const std::string& path) {
  std::string s;
  ReadFileToString(path, &s).IgnoreError();
  return s;
}

class RobustnessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hilnas_robust_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  // A copy of the committed demo backbone this test may damage.
  std::string Backbone() {
    const std::string d = dir_ + "/backbone";
    fs::copy(std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone", d,
             fs::copy_options::recursive);
    return d;
  }
  std::string dir_;
};

TEST_F(RobustnessTest, AFolderWhereTheWeightsBelongIsAnErrorInCheckRunAndPrune) {
  const std::string d = Backbone();
  fs::remove(d + "/model.safetensors");
  fs::create_directory(d + "/model.safetensors");
  ExpectCleanError(Hilnas("checkpoint check " + d), "model.safetensors is a directory");
  ExpectCleanError(Hilnas("run --ckpt " + d + " --prompt-tokens 8 --max-new-tokens 2"),
                   "model.safetensors is a directory");
  ExpectCleanError(Hilnas("prune --base " + d + " --layers 4 --out " + dir_ + "/p"),
                   "model.safetensors is a directory");
}

TEST_F(RobustnessTest, AFifoWhereAFileBelongsDoesNotBlock) {
  const std::string d = Backbone();
  fs::remove(d + "/model.safetensors");
  ASSERT_EQ(mkfifo((d + "/model.safetensors").c_str(), 0600), 0);
  ExpectCleanError(Hilnas("checkpoint check " + d), "model.safetensors is a FIFO");
  ASSERT_EQ(mkfifo((dir_ + "/arch.textproto").c_str(), 0600), 0);
  ExpectCleanError(Hilnas("run --arch " + dir_ + "/arch.textproto"), "arch.textproto is a FIFO");
}

TEST_F(RobustnessTest, HugeSizesFailBeforeAnythingIsAllocated) {
  ExpectCleanError(Hilnas("run --shape mobilellm-flash-350m --prompt-tokens 4000000000"),
                   "--prompt-tokens 4000000000");
  ExpectCleanError(Hilnas("run --shape mobilellm-flash-350m --prompt-tokens 8 "
                          "--max-new-tokens 1000000000"),
                   "--max-new-tokens 1000000000");
  ExpectCleanError(Hilnas("run --shape mobilellm-flash-350m --threads 100000"),
                   "--threads 100000 is not in 1..");
  std::ofstream(dir_ + "/deep.json")
      << R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
             "num_hidden_layers": 100000, "vocab_size": 256})";
  ExpectCleanError(Hilnas("checkpoint init --arch " + dir_ + "/deep.json --out " + dir_ + "/o"),
                   "num_layers 100000 exceeds the largest accepted");
  // Within every bound, but not within this machine's memory: the estimate.
  std::ofstream(dir_ + "/wide.json")
      << R"({"model_type": "llama", "hidden_size": 65536, "intermediate_size": 262144, "num_attention_heads": 512,
             "num_hidden_layers": 1024, "vocab_size": 4194304})";
  ExpectCleanError(Hilnas("checkpoint init --arch " + dir_ + "/wide.json --out " + dir_ + "/o"),
                   "MiB for weights and KV cache");
  EXPECT_FALSE(fs::exists(dir_ + "/o"));
}

TEST_F(RobustnessTest, FlagsOutsideTheirRangesAreRefusedBeforeWork) {
  std::ofstream tokens(dir_ + "/tokens.bin", std::ios::binary);
  for (int i = 0; i < 20000; ++i) tokens.put(static_cast<char>(i % 200)).put(0);
  tokens.close();
  const std::string arch = std::string(HILNAS_SOURCE_DIR) + "/configs/tiny-arch.textproto";
  ExpectCleanError(Hilnas("train --arch " + arch + " --tokens " + dir_ +
                          "/tokens.bin --batch-size 1000000000 --steps 1 --out " + dir_ + "/t"),
                   "--batch-size: Value 1000000000 not in range 1 to 4096");
  ExpectCleanError(Hilnas("space sample --n -5"), "--n: Value -5 not in range 1 to 1000000");
  ExpectCleanError(Hilnas("fleet --agents 100000"), "--agents 100000 is not in 1..64");
  EXPECT_FALSE(fs::exists(dir_ + "/t"));
}

TEST_F(RobustnessTest, ConfigIntegersAreRangeCheckedBeforeNarrowing) {
  for (const char* vocab : {"4294967552", "1099511627776"}) {
    std::ofstream(dir_ + "/c.json")
        << R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
               "num_hidden_layers": 2, "vocab_size": )"
        << vocab << "}";
    ExpectCleanError(Hilnas("run --arch " + dir_ + "/c.json --prompt-tokens 8"),
                     absl::StrCat("\"vocab_size\" ", vocab, " is out of range"));
  }
}

TEST_F(RobustnessTest, PruneNeverWritesOverItsInputOrAnExistingCheckpoint) {
  const std::string d = Backbone();
  const std::string weights = Slurp(d + "/model.safetensors");
  const std::string metrics = Slurp(d + "/metrics.json");
  ExpectCleanError(Hilnas("prune --base " + d + " --layers 4 --out " + d),
                   "would write over the input");
  ExpectCleanError(Hilnas("prune --base " + d + " --layers 4 --out " + d + "/inside"),
                   "would write over the input");
  ExpectCleanError(Hilnas("prune --base " + d + " --layers 4 --overwrite --out " + d),
                   "would write over the input");
  EXPECT_EQ(Slurp(d + "/model.safetensors"), weights);
  EXPECT_EQ(Slurp(d + "/metrics.json"), metrics);
  EXPECT_FALSE(fs::exists(d + "/inside"));

  const std::string out = dir_ + "/pruned";
  Result first = Hilnas("prune --base " + d + " --layers 6 --out " + out);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::ofstream(out + "/train.json") << "{\"describes\": \"the 6-layer model\"}";
  const std::string six = Slurp(out + "/config.json");
  ExpectCleanError(Hilnas("prune --base " + d + " --layers 4 --out " + out), "--overwrite");
  EXPECT_EQ(Slurp(out + "/config.json"), six);
  Result replaced = Hilnas("prune --base " + d + " --layers 4 --overwrite --out " + out);
  ASSERT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_NE(Slurp(out + "/config.json"), six);
  // The old folder went as a whole: no stale train.json describing a model that is gone.
  EXPECT_FALSE(fs::exists(out + "/train.json"));
  for (const auto& e : fs::directory_iterator(dir_)) {
    EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(".tmp-")));
    EXPECT_THAT(e.path().filename().string(), ::testing::Not(HasSubstr(".old-")));
  }
}

TEST_F(RobustnessTest, TrainAndCheckpointInitRefuseAnExistingCheckpoint) {
  const std::string d = Backbone();
  const std::string weights = Slurp(d + "/model.safetensors");
  ExpectCleanError(
      Hilnas("train --ckpt " + d + " --tokens " + d + "/corpus.bin --steps 1 --out " + d),
      "would write over the input");
  ExpectCleanError(Hilnas("checkpoint init --shape mobilellm-flash-350m --out " + d),
                   "exists and is not empty");
  EXPECT_EQ(Slurp(d + "/model.safetensors"), weights);
}

TEST_F(RobustnessTest, CheckValuesFindsNanWeightsAndCalibrationRefusesThem) {
  const std::string d = dir_ + "/ckpt";
  ASSERT_EQ(Hilnas("checkpoint init --arch " + std::string(HILNAS_SOURCE_DIR) +
                   "/configs/tiny-arch.textproto --out " + d)
                .exit_code,
            0);
  // Poison 1024 f32 weights in the middle of the data with NaN (aligned:
  // the header is padded to 8 bytes, as hilnas writes it).
  {
    std::fstream f(d + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const int64_t size = f.tellg();
    f.seekp((size / 2) & ~int64_t{7});
    const unsigned char nan[4] = {0x00, 0x00, 0xc0, 0x7f};
    for (int i = 0; i < 1024; ++i) f.write(reinterpret_cast<const char*>(nan), 4);
  }
  Result plain = Hilnas("checkpoint check " + d);
  EXPECT_EQ(plain.exit_code, 0) << plain.output;  // the structure is fine
  ExpectCleanError(Hilnas("checkpoint check --values " + d), "NaN or Inf weights, in model.");
  std::ofstream tokens(dir_ + "/tokens.bin", std::ios::binary);
  for (int i = 0; i < 20000; ++i) tokens.put(static_cast<char>(i % 200)).put(0);
  tokens.close();
  ExpectCleanError(Hilnas("calibrate --ckpt " + d + " --tokens " + dir_ +
                          "/tokens.bin --seq-len 32 --batch-size 2 --calib-tokens 256"),
                   "NaN or Inf activation metrics");
  EXPECT_FALSE(fs::exists(d + "/metrics.json"));
}

TEST_F(RobustnessTest, PoisonCampaignsAreRefusedAtCreate) {
  std::string text = Slurp(std::string(HILNAS_SOURCE_DIR) + "/tests/data/tiny-demo.textproto");
  ASSERT_FALSE(text.empty());
  const std::string rel = "\"data/demo-backbone\"";
  text.replace(text.find(rel), rel.size(),
               absl::StrCat("\"", HILNAS_SOURCE_DIR, "/data/demo-backbone\""));
  const std::string path = dir_ + "/poison.textproto";
  std::ofstream(path) << text << "mc_samples: 1000000000\n";
  // Validation happens before any coordinator is contacted: none runs here.
  ExpectCleanError(Hilnas("campaign create --coordinator 127.0.0.1:1 --config " + path),
                   "mc_samples");
  text.replace(text.find("candidates: 100"), 15, "candidates: 1000000000");
  std::ofstream(path) << text;
  ExpectCleanError(Hilnas("campaign create --coordinator 127.0.0.1:1 --config " + path),
                   "candidates: 1000000000 exceeds");
}

}  // namespace
}  // namespace hilnas
