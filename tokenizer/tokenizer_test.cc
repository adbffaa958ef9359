#include "tokenizer/tokenizer.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"
#include "tokenizer/test_tokenizers.h"

namespace hilnas::tokenizer {
namespace {

using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

Tokenizer Load(const json& j) {
  auto tok = Tokenizer::FromJson(j.dump(), "test.json");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return *std::move(tok);
}

TEST(TokenizerTest, ByteLevelMergesByRank) {
  Tokenizer tok = Load(ByteLevelJson());
  EXPECT_TRUE(tok.byte_level());
  EXPECT_EQ(tok.vocab_size(), 262);
  // "abc ab": "abc" then " ab" (GPT-2 regex keeps the space with the word;
  // " a" outranks "ab").
  EXPECT_THAT(*tok.Encode("abc ab"), ElementsAre(257, 259));
  EXPECT_THAT(*tok.Encode("xab"), ElementsAre('x', 256));
  EXPECT_THAT(*tok.Encode("ba"), ElementsAre('b', 'a'));
  EXPECT_EQ(*tok.Decode({257, 259}), "abc ab");
}

TEST(TokenizerTest, TemplateAddsBosOnlyWhenAsked) {
  Tokenizer tok = Load(ByteLevelJson());
  EXPECT_THAT(*tok.Encode("ab", true), ElementsAre(260, 256));
  EXPECT_THAT(*tok.Encode("ab", false), ElementsAre(256));
  EXPECT_TRUE(tok.adds_bos());
  EXPECT_EQ(tok.bos_id(), 260);
}

TEST(TokenizerTest, AddedTokensSplitTextAndStripSpaces) {
  Tokenizer tok = Load(ByteLevelJson());
  // Literal special text becomes its id; <tag> swallows spaces both sides.
  EXPECT_THAT(*tok.Encode("<|bos|>ab  <tag>  ab"), ElementsAre(260, 256, 261, 256));
  EXPECT_EQ(tok.token_type(260), TokenType::kControl);
  EXPECT_EQ(tok.token_type(261), TokenType::kUserDefined);
  EXPECT_EQ(*tok.Decode({260, 256}, /*skip_special_tokens=*/true), "ab");
  EXPECT_EQ(*tok.Decode({260, 256}), "<|bos|>ab");
}

TEST(TokenizerTest, InvalidUtf8NamesTheOffset) {
  Tokenizer tok = Load(ByteLevelJson());
  auto ids = tok.Encode(std::string("ok\xC3\x28", 4));
  ASSERT_FALSE(ids.ok());
  EXPECT_THAT(ids.status().message(), HasSubstr("offset 2"));
  EXPECT_EQ(FirstInvalidUtf8("\xED\xA0\x80"), 0u);        // a surrogate
  EXPECT_EQ(FirstInvalidUtf8("abc\xC0\xAF"), 3u);         // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("12345678\xF4\x90\x80\x80"), 8u);  // > U+10FFFF
  EXPECT_FALSE(FirstInvalidUtf8("\xF0\x9F\x98\x80 fine").has_value());
}

TEST(TokenizerTest, DecodeReplacesBrokenBytesAsRustDoes) {
  Tokenizer tok = Load(ByteLevelJson());
  // 0xE2 0x82 alone (a cut 3-byte sequence) is one U+FFFD; 0xFF is another.
  EXPECT_EQ(*tok.Decode({0xE2, 0x82, 'x', 0xFF}), "\xEF\xBF\xBDx\xEF\xBF\xBD");
  auto bad = tok.Decode({5000});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("id 5000"));
}

// SentencePiece-style: spaces become U+2581, unknown characters fall back to
// <0xXX> byte tokens, the decoder undoes both.
json SentencePieceJson() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"\xE2\x96\x81", 2}, {"h", 3}, {"i", 4},
                {"hi", 5},    {"\xE2\x96\x81hi", 6}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 7 + b;
  }
  json j;
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                                  {{"type", "Replace"},
                                                   {"pattern", {{"String", " "}}},
                                                   {"content", "\xE2\x96\x81"}}})}};
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"unk_token", "<unk>"},
                {"byte_fallback", true}, {"fuse_unk", true},
                {"merges", json::array({json::array({"h", "i"}), json::array({"\xE2\x96\x81", "hi"})})}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "Replace"},
                                             {"pattern", {{"String", "\xE2\x96\x81"}}},
                                             {"content", " "}},
                                            {{"type", "ByteFallback"}},
                                            {{"type", "Fuse"}},
                                            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  return j;
}

TEST(TokenizerTest, SentencePieceStyleWithByteFallback) {
  Tokenizer tok = Load(SentencePieceJson());
  EXPECT_FALSE(tok.byte_level());
  // "hi hi" -> "▁hi▁hi"; "é" (C3 A9) has no token: two byte tokens.
  EXPECT_THAT(*tok.Encode("hi hi"), ElementsAre(6, 6));
  EXPECT_THAT(*tok.Encode("\xC3\xA9"), ElementsAre(2, 7 + 0xC3, 7 + 0xA9));
  EXPECT_EQ(tok.token_type(7 + 0xC3), TokenType::kByte);
  EXPECT_EQ(tok.token_type(0), TokenType::kUnknown);
  EXPECT_EQ(*tok.Decode(*tok.Encode("hi \xC3\xA9hi")), "hi \xC3\xA9hi");
  // A lone byte token that is not UTF-8 decodes to U+FFFD.
  EXPECT_EQ(*tok.Decode({3, 7 + 0xC3, 4}), "h\xEF\xBF\xBDi");
}

TEST(TokenizerTest, RefusesWhatItCannotReproduce) {
  json unigram = ByteLevelJson();
  unigram["model"] = {{"type", "Unigram"}, {"vocab", json::array()}};
  auto a = Tokenizer::FromJson(unigram.dump(), "u.json");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.status().message(), HasSubstr("Unigram"));
  EXPECT_THAT(a.status().message(), HasSubstr("u.json"));

  json bert = ByteLevelJson();
  bert["normalizer"] = {{"type", "BertNormalizer"}};
  auto b = Tokenizer::FromJson(bert.dump(), "b.json");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.status().message(), HasSubstr("BertNormalizer"));

  json merges = ByteLevelJson();
  merges["model"]["merges"].push_back("x zz");
  auto c = Tokenizer::FromJson(merges.dump(), "m.json");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.status().message(), HasSubstr("model.merges[4]"));

  auto d = Tokenizer::FromJson("{\"model\": ", "broken.json");
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("broken.json"));
}

TEST(TokenizerTest, MetaspacePreTokenizerPrependsOnlyFirst) {
  json j = SentencePieceJson();
  j.erase("normalizer");
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                        {"prepend_scheme", "first"}, {"split", true}};
  j["added_tokens"] = json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}}});
  Tokenizer tok = Load(j);
  EXPECT_THAT(*tok.Encode("hi hi"), ElementsAre(6, 6));
  // After an added token the text is not at the start: no "▁" prepended.
  EXPECT_THAT(*tok.Encode("<s>hi"), ElementsAre(1, 5));
}

TEST(RegexTest, WhiteSpaceIsOnigurumas) {
  auto rewritten = Regex::Rewrite("\\s+(?!\\S)|[^\\s\\p{L}]");
  ASSERT_TRUE(rewritten.ok());
  EXPECT_THAT(*rewritten, Not(HasSubstr("\\s")));
  auto re = Regex::Compile("\\s+", false);
  ASSERT_TRUE(re.ok());
  std::vector<std::pair<size_t, size_t>> m;
  // U+180E is not White_Space (PCRE2's own \s would take it).
  ASSERT_TRUE((*re)->FindAll("a \xE1\xA0\x8E \xE3\x80\x80" "b", &m).ok());
  EXPECT_THAT(m, ElementsAre(std::make_pair(1u, 2u), std::make_pair(5u, 9u)));
  EXPECT_FALSE(Regex::Compile("[\\S]", false).ok());
  EXPECT_FALSE(Regex::Compile("(unclosed", false).ok());
}

}  // namespace
}  // namespace hilnas::tokenizer
