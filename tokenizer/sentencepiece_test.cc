// A folder that ships only a SentencePiece tokenizer.model: read through
// Google's library, with its vocabulary, special ids and spec fields exposed
// as the rest of hilnas (corpus, GGUF export) needs them.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/tokenizer.h"
#include "util/secrets.h"
#include "util/textproto.h"

namespace hilnas::tokenizer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Deterministic English-like training text with a few accented words.
std::string TrainingText() {
  const std::vector<std::string> words = {
      "the", "model", "prunes", "layers", "phone", "latency", "token", "search", "front",
      "quality", "attention", "window", "café", "naïve", "über", "decode", "prefill", "width",
      "depth", "candidate", "measure", "time", "first", "answer", "seconds", "within"};
  std::string text;
  uint32_t state = 12345;
  for (int line = 0; line < 3000; ++line) {
    const int n = 4 + line % 9;
    for (int w = 0; w < n; ++w) {
      state = state * 1664525u + 1013904223u;
      text += words[(state >> 8) % words.size()];
      text += w + 1 < n ? " " : ".\n";
    }
  }
  return text;
}

class SentencePieceTest : public ::testing::Test {
 protected:
  // Trains DIR/tokenizer.model (spm_train's flags in `extra`) once per name.
  static std::string Train(const std::string& name, const std::string& extra) {
    const std::string dir = ::testing::TempDir() + "/spm_" + name;
    if (fs::exists(dir + "/tokenizer.model")) return dir;
    fs::create_directories(dir);
    const std::string input = dir + "/train.txt";
    std::ofstream(input) << TrainingText();
    const std::string error = internal::TrainSentencePiece(
        "--input=" + input + " --model_prefix=" + dir + "/tokenizer --minloglevel=2 " + extra);
    EXPECT_EQ(error, "");
    fs::remove(input);
    fs::remove(dir + "/tokenizer.vocab");
    return dir;
  }
  // Llama 2's settings: BPE, byte fallback, no normalization, spaces kept.
  static std::string LlamaStyle() {
    return Train("bpe", "--model_type=bpe --vocab_size=400 --byte_fallback=true "
                        "--normalization_rule_name=identity --remove_extra_whitespaces=false "
                        "--character_coverage=1.0");
  }
};

TEST_F(SentencePieceTest, FolderWithOnlyTokenizerModelIsRead) {
  const std::string dir = LlamaStyle();
  EXPECT_EQ(Tokenizer::FileInDir(dir), dir + "/tokenizer.model");
  auto tok = Tokenizer::FromDir(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_NE(tok->sentencepiece(), nullptr);
  EXPECT_EQ(tok->sentencepiece()->model_type, "bpe");
  EXPECT_FALSE(tok->sentencepiece()->unigram);
  EXPECT_EQ(tok->sentencepiece()->normalizer, "identity");
  EXPECT_FALSE(tok->sentencepiece()->removes_extra_whitespaces);
  EXPECT_EQ(tok->vocab_size(), 400);
  EXPECT_EQ(tok->sentencepiece()->scores.size(), 400u);
  EXPECT_FALSE(tok->byte_level());
  EXPECT_TRUE(tok->prepends_space());
  EXPECT_FALSE(tok->normalizes_unicode());

  // spm_train's default ids and SentencePiece's piece types.
  EXPECT_EQ(tok->unk_id(), 0);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->token(1), "<s>");
  EXPECT_EQ(tok->token_type(0), TokenType::kUnknown);
  EXPECT_EQ(tok->token_type(1), TokenType::kControl);
  EXPECT_EQ(tok->token_type(2), TokenType::kControl);
  ASSERT_TRUE(tok->TokenId("<0x0A>").has_value());
  EXPECT_EQ(tok->token_type(*tok->TokenId("<0x0A>")), TokenType::kByte);
  ASSERT_TRUE(tok->TokenId("\xE2\x96\x81the").has_value());  // "▁the"
  EXPECT_EQ(tok->token_type(*tok->TokenId("\xE2\x96\x81the")), TokenType::kNormal);

  // The fingerprint is the model file's SHA-256, as token files record it.
  std::string bytes;
  ASSERT_TRUE(ReadFileToString(dir + "/tokenizer.model", &bytes).ok());
  EXPECT_EQ(tok->fingerprint(), Sha256Hex(bytes));
}

TEST_F(SentencePieceTest, EncodesAndDecodesLosslesslyWithByteFallback) {
  auto tok = Tokenizer::FromDir(LlamaStyle());
  ASSERT_TRUE(tok.ok()) << tok.status();
  // Words it was trained on, spaces kept, CJK and emoji through <0xXX>.
  const std::string text = "the model prunes  layers\n\tcafé 東京 \xF0\x9F\x91\x8D end";
  auto ids = tok->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*tok->Decode(*ids), text);
  // "▁the" is one piece; 東 and 京 (3 bytes each), the emoji (4), and \n
  // and \t (never seen: training reads one sentence per line) are bytes.
  EXPECT_EQ((*ids)[0], *tok->TokenId("\xE2\x96\x81the"));
  int bytes = 0;
  for (int32_t id : *ids) bytes += tok->token_type(id) == TokenType::kByte;
  EXPECT_EQ(bytes, 3 + 3 + 4 + 1 + 1);
  // BOS is added (Hugging Face's LlamaTokenizer default), EOS is not.
  auto framed = tok->Encode("the", /*add_special_tokens=*/true);
  ASSERT_TRUE(framed.ok());
  EXPECT_EQ(framed->front(), 1);
  EXPECT_NE(framed->back(), 2);
  EXPECT_TRUE(tok->adds_bos());
  EXPECT_FALSE(tok->adds_eos());
  // Control tokens decode to nothing; ids out of range are refused.
  EXPECT_EQ(*tok->Decode(*framed, /*skip_special_tokens=*/true), "the");
  EXPECT_FALSE(tok->Decode({400}).ok());
  // Invalid UTF-8 is refused with its offset, as for tokenizer.json.
  auto bad = tok->Encode(std::string("ab\xFF", 3));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("offset 2"));
}

TEST_F(SentencePieceTest, TokenizerConfigSetsBosAndEos) {
  const std::string dir = LlamaStyle();
  std::string bytes;
  ASSERT_TRUE(ReadFileToString(dir + "/tokenizer.model", &bytes).ok());
  auto tok = Tokenizer::FromSentencePiece(bytes, "m",
                                          R"({"add_bos_token": false, "add_eos_token": true})");
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = tok->Encode("the", true);
  ASSERT_TRUE(ids.ok());
  EXPECT_NE(ids->front(), 1);
  EXPECT_EQ(ids->back(), 2);
}

TEST_F(SentencePieceTest, UnigramModelIsRunByTheLibrary) {
  const std::string dir = Train("unigram", "--model_type=unigram --vocab_size=50 --hard_vocab_limit=false");
  auto tok = Tokenizer::FromDir(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  ASSERT_NE(tok->sentencepiece(), nullptr);
  EXPECT_TRUE(tok->sentencepiece()->unigram);
  EXPECT_EQ(tok->sentencepiece()->normalizer, "nmt_nfkc");
  EXPECT_TRUE(tok->sentencepiece()->removes_extra_whitespaces);
  EXPECT_TRUE(tok->normalizes_unicode());
  // nmt_nfkc + whitespace folding: "the   model" reads back with one space.
  auto ids = tok->Encode("the   model");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*tok->Decode(*ids), "the model");
}

TEST_F(SentencePieceTest, CorruptOrTruncatedModelIsRefusedByName) {
  const std::string good = LlamaStyle();
  std::string bytes;
  ASSERT_TRUE(ReadFileToString(good + "/tokenizer.model", &bytes).ok());
  const std::string dir = ::testing::TempDir() + "/spm_corrupt";
  fs::create_directories(dir);
  std::ofstream(dir + "/tokenizer.model", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  auto tok = Tokenizer::FromDir(dir);
  ASSERT_FALSE(tok.ok());
  EXPECT_THAT(tok.status().message(), HasSubstr(dir + "/tokenizer.model"));
  std::ofstream(dir + "/tokenizer.model", std::ios::binary) << "not a model";
  EXPECT_FALSE(Tokenizer::FromDir(dir).ok());
  // No tokenizer at all names both files it looked for.
  fs::remove(dir + "/tokenizer.model");
  auto none = Tokenizer::FromDir(dir);
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr("tokenizer.model"));
}

TEST_F(SentencePieceTest, TokenizerJsonWinsWhenBothShip) {
  const std::string dir = ::testing::TempDir() + "/spm_both";
  fs::create_directories(dir);
  fs::copy_file(LlamaStyle() + "/tokenizer.model", dir + "/tokenizer.model",
                fs::copy_options::overwrite_existing);
  std::ofstream(dir + "/tokenizer.json")
      << R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}})";
  EXPECT_EQ(Tokenizer::FileInDir(dir), dir + "/tokenizer.json");
  auto tok = Tokenizer::FromDir(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ(tok->sentencepiece(), nullptr);
  EXPECT_EQ(tok->vocab_size(), 2);
}

}  // namespace
}  // namespace hilnas::tokenizer
