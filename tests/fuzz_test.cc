// Random mutations of the three inputs users hand hilnas most: a checkpoint
// folder (config.json + model.safetensors), a campaign .textproto and a
// Hugging Face config.json. A few hundred each, from a fixed seed, bounded
// in time: every one must end in OK or a clean status, never an exception,
// a signal (the test process would die) or a hang (ctest's timeout).
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/campaign_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "quality/tokens.h"
#include "util/npy.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;

constexpr int kMutationsEach = 300;
constexpr double kSecondsEach = 60;  // a slow machine stops early, and says so

// Numbers that have broken parsers before: wrap-arounds, overflows,
// negatives, zero, huge, non-finite.
const char* const kNastyNumbers[] = {
    "0",     "-1",     "4294967552", "1099511627776", "2147483648", "-2147483649",
    "1e999", "-1e999", "1e-999",     "100000",        "NaN",        "18446744073709551616",
    "65537", "0.5"};

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}

  // One of: flip bytes, truncate, insert junk, duplicate a span, or (for
  // text) replace a number with a nasty one.
  std::string Mutate(std::string s, bool text) {
    const int kinds = text ? 5 : 4;
    switch (Pick(kinds)) {
      case 0:  // flip 1..8 bytes
        for (int i = Pick(8) + 1; i > 0 && !s.empty(); --i) s[Pick(s.size())] ^= 1 << Pick(8);
        break;
      case 1:  // truncate
        s.resize(Pick(s.size() + 1));
        break;
      case 2: {  // insert 1..16 random bytes
        std::string junk(Pick(16) + 1, '\0');
        for (char& c : junk) c = static_cast<char>(Pick(256));
        s.insert(Pick(s.size() + 1), junk);
        break;
      }
      case 3:  // duplicate a span
        if (!s.empty()) {
          const size_t a = Pick(s.size()), n = Pick(std::min<size_t>(64, s.size() - a)) + 1;
          s.insert(Pick(s.size() + 1), s.substr(a, n));
        }
        break;
      default: {  // a number becomes a nasty one
        std::vector<size_t> starts;
        for (size_t i = 0; i < s.size(); ++i) {
          if (std::isdigit(static_cast<unsigned char>(s[i])) &&
              (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1])))) {
            starts.push_back(i);
          }
        }
        if (starts.empty()) break;
        const size_t at = starts[Pick(starts.size())];
        size_t end = at;
        while (end < s.size() && (std::isdigit(static_cast<unsigned char>(s[end])) ||
                                  s[end] == '.' || s[end] == 'e' || s[end] == '-')) {
          ++end;
        }
        s.replace(at, end - at, kNastyNumbers[Pick(std::size(kNastyNumbers))]);
      }
    }
    return s;
  }

 private:
  size_t Pick(size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
  }
  std::mt19937_64 rng_;
};

std::string Slurp(const std::string& path) {
  std::string s;
  EXPECT_TRUE(ReadFileToString(path, &s).ok()) << path;
  return s;
}

void Spit(const std::string& path, const std::string& s) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << s;
}

// Runs `attempt` on `kMutationsEach` mutations; fails on any exception.
template <typename F>
void Fuzz(const std::string& what, F attempt) {
  const auto t0 = std::chrono::steady_clock::now();
  int ok = 0, errors = 0, done = 0;
  for (; done < kMutationsEach; ++done) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::duration<double>(kSecondsEach)) {
      std::printf("%s: stopped after %d mutations (%.0f s limit)\n", what.c_str(), done,
                  kSecondsEach);
      break;
    }
    try {
      const absl::Status s = attempt(done);
      (s.ok() ? ok : errors)++;
      if (!s.ok()) {
        EXPECT_FALSE(s.message().empty()) << what << " mutation " << done;
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << " mutation " << done << " threw: " << e.what();
    }
  }
  std::printf("%s: %d mutations, %d accepted, %d clean errors\n", what.c_str(), done, ok, errors);
  EXPECT_GT(errors, 0) << "no mutation was caught: the mutator is not mutating";
}

class FuzzTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hilnas_fuzz_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  std::string dir_;
};

TEST_F(FuzzTest, MutatedCheckpointFoldersLoadOrFailCleanly) {
  const std::string src = std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone";
  const std::string config = Slurp(src + "/config.json");
  const std::string weights = Slurp(src + "/model.safetensors");
  Mutator m(20261123);
  const std::string d = dir_ + "/ckpt";
  fs::create_directories(d);
  Fuzz("checkpoint folder", [&](int i) {
    // Mostly the weights (where the bytes are); sometimes the config.
    const bool mutate_config = i % 4 == 0;
    Spit(d + "/config.json", mutate_config ? m.Mutate(config, true) : config);
    Spit(d + "/model.safetensors", mutate_config ? weights : m.Mutate(weights, false));
    return LoadCheckpoint(d).status();
  });
}

TEST_F(FuzzTest, MutatedCampaignConfigsAreAcceptedOrRefusedCleanly) {
  std::string text = Slurp(std::string(HILNAS_SOURCE_DIR) + "/tests/data/tiny-demo.textproto");
  const std::string rel = "\"data/demo-backbone\"";
  text.replace(text.find(rel), rel.size(),
               absl::StrCat("\"", HILNAS_SOURCE_DIR, "/data/demo-backbone\""));
  // A token file, so the unmutated config is valid.
  std::ofstream tokens(dir_ + "/tokens.bin", std::ios::binary);
  for (int i = 0; i < 4000; ++i) tokens.put(static_cast<char>('a' + i % 26)).put(0);
  tokens.close();
  text += absl::StrCat("\ntokens: \"", dir_, "/tokens.bin\"\n");
  Spit(dir_ + "/c.textproto", text);
  ASSERT_TRUE(ReadCampaignConfig(dir_ + "/c.textproto").ok());
  Mutator m(7);
  Fuzz("campaign textproto", [&](int) {
    Spit(dir_ + "/c.textproto", m.Mutate(text, true));
    return ReadCampaignConfig(dir_ + "/c.textproto").status();
  });
}

TEST_F(FuzzTest, MutatedConfigJsonIsReadOrRefusedCleanly) {
  const std::string config =
      Slurp(std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone/config.json");
  Mutator m(42);
  Fuzz("config.json", [&](int) {
    Spit(dir_ + "/config.json", m.Mutate(config, true));
    return ReadConfigJson(dir_ + "/config.json").status();
  });
}

TEST_F(FuzzTest, MutatedPublishedConfigsAreReadOrRefusedCleanly) {
  // The Hugging Face fields the published families add: rope_scaling llama3,
  // Qwen3's class, null head_dim and sliding_window, bias flags.
  auto j = nlohmann::json::parse(
      Slurp(std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone/config.json"));
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["model_type"] = "qwen3";
  j.erase("qk_norm");  // implied by the class
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  j["sliding_window"] = nullptr;
  j["use_sliding_window"] = false;
  j["attention_bias"] = false;
  const std::string config = j.dump(2);
  Spit(dir_ + "/config.json", config);
  const absl::Status read = ReadConfigJson(dir_ + "/config.json").status();
  ASSERT_TRUE(read.ok()) << read;
  Mutator m(1123);
  Fuzz("published config.json", [&](int) {
    Spit(dir_ + "/config.json", m.Mutate(config, true));
    return ReadConfigJson(dir_ + "/config.json").status();
  });
}

TEST_F(FuzzTest, MutatedNumpyTokenFilesAreReadOrRefusedCleanly) {
  std::string data;
  for (int i = 0; i < 500; ++i) {
    const uint32_t id = static_cast<uint32_t>(i * 7 % 256);
    for (int b = 0; b < 4; ++b) data += static_cast<char>((id >> (8 * b)) & 0xff);
  }
  const std::string npy = NpyBytes("<u4", "(500,)", data);
  const std::string path = dir_ + "/tokens.npy";
  Spit(path, npy);
  ASSERT_TRUE(ReadTokenFile(path, 256).ok());
  Mutator m(99);
  Fuzz(".npy tokens", [&](int i) {
    // Header bytes (where the parsing is) as often as data bytes.
    std::string bytes = npy;
    const std::string head = m.Mutate(bytes.substr(0, 128), i % 2 == 0);
    bytes.replace(0, 128, head);
    if (i % 3 == 0) bytes = m.Mutate(bytes, false);
    Spit(path, bytes);
    return ReadTokenFile(path, 256).status();
  });
}

}  // namespace
}  // namespace hilnas
