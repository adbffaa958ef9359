#include "tokenizer/corpus.h"

#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/test_tokenizers.h"

namespace hilnas::tokenizer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

// The tiny byte-level tokenizer with an end-of-text token (id 262) and a
// template that adds <|bos|> (260).
Tokenizer Tiny() {
  json j = ByteLevelJson();
  j["added_tokens"].push_back({{"id", 262}, {"content", "<|eot|>"}, {"special", true}, {"normalized", false}});
  auto tok = Tokenizer::FromJson(j.dump(), "tiny.json", R"({"eos_token": "<|eot|>"})");
  EXPECT_TRUE(tok.ok()) << tok.status();
  return *std::move(tok);
}

std::string Dir(const std::string& name) {
  std::string d = testing::TempDir() + "/corpus_" + name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::vector<int32_t> ReadU32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<int32_t> ids;
  uint32_t v;
  while (in.read(reinterpret_cast<char*>(&v), 4)) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

std::vector<int32_t> Framed(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids = {260};
  auto body = tok.Encode(text);
  ids.insert(ids.end(), body->begin(), body->end());
  ids.push_back(262);
  return ids;
}

TEST(CorpusTest, TextJsonlAndGzipDocumentsFramedInOrder) {
  Tokenizer tok = Tiny();
  std::string d = Dir("mixed");
  fs::create_directories(d + "/in/sub");
  std::ofstream(d + "/in/a.txt") << "abc ab\nsecond line\n";
  std::ofstream(d + "/in/b.jsonl") << R"({"text": "first doc", "id": 1})" << "\n\n"
                                   << R"({"text": "caf\u00e9 <|eot|>"})" << "\n";
  gzFile gz = gzopen((d + "/in/sub/c.txt.gz").c_str(), "wb");
  gzputs(gz, "gzipped text\n");
  gzclose(gz);
  std::ofstream(d + "/in/ignored.bin") << "not text";
  CorpusSpec spec;
  spec.text_paths = {d + "/in"};
  spec.out = d + "/out.u32";
  spec.threads = 2;
  int progress_calls = 0;
  spec.progress = [&](const CorpusProgress&) { ++progress_calls; };
  auto result = BuildCorpus(tok, "tiny.json", spec);
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<int32_t> want;
  for (const char* text : {"abc ab\nsecond line\n", "first doc", "caf\xC3\xA9 <|eot|>", "gzipped text\n"}) {
    auto f = Framed(tok, text);
    want.insert(want.end(), f.begin(), f.end());
  }
  EXPECT_EQ(ReadU32(spec.out), want);
  EXPECT_EQ(result->documents, 4);
  EXPECT_GE(progress_calls, 1);
  EXPECT_EQ(TokenFileFingerprint(spec.out), tok.fingerprint());
  std::ifstream in(spec.out + ".json");
  json manifest = json::parse(in);
  EXPECT_EQ(manifest["sources"].size(), 3u);
  EXPECT_EQ(manifest["tokens"].get<int64_t>(), static_cast<int64_t>(want.size()));
  EXPECT_EQ(manifest["sources"][2]["bytes"].get<int64_t>(), 13);  // decompressed
}

TEST(CorpusTest, LongDocumentCutInPiecesEncodesAsAWhole) {
  Tokenizer tok = Tiny();
  std::string d = Dir("long");
  std::string text;
  for (int i = 0; text.size() < (3u << 20); ++i) {
    text += "line " + std::to_string(i) + " abc  ab\n\n  indented\n";
  }
  std::ofstream(d + "/long.txt") << text;
  CorpusSpec spec;
  spec.text_paths = {d + "/long.txt"};
  spec.out = d + "/out.u32";
  spec.threads = 2;
  auto result = BuildCorpus(tok, "tiny.json", spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ReadU32(spec.out), Framed(tok, text));
}

TEST(CorpusTest, HeldoutByDocumentAndMaxTokens) {
  Tokenizer tok = Tiny();
  std::string d = Dir("split");
  {
    std::ofstream out(d + "/docs.jsonl");
    for (int i = 0; i < 200; ++i) out << json({{"body", "document number " + std::to_string(i)}}).dump() << "\n";
  }
  CorpusSpec spec;
  spec.text_paths = {d + "/docs.jsonl"};
  spec.jsonl_field = "body";
  spec.out = d + "/out.u32";
  spec.heldout_fraction = 0.25;
  auto result = BuildCorpus(tok, "tiny.json", spec);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->documents + result->heldout_documents, 200);
  EXPECT_GT(result->heldout_documents, 20);
  EXPECT_LT(result->heldout_documents, 80);
  EXPECT_EQ(static_cast<int64_t>(ReadU32(HeldoutPath(spec.out)).size()), result->heldout_tokens);
  // The same split whatever else is in the run.
  auto again = BuildCorpus(tok, "tiny.json", spec);
  EXPECT_EQ(again->heldout_documents, result->heldout_documents);

  spec.heldout_fraction = 0;
  spec.max_tokens = 100;
  auto capped = BuildCorpus(tok, "tiny.json", spec);
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(ReadU32(spec.out).size(), 100u);
  EXPECT_TRUE(capped->truncated);
}

TEST(CorpusTest, BadInputNamesFileLineAndField) {
  Tokenizer tok = Tiny();
  std::string d = Dir("bad");
  std::ofstream(d + "/a.jsonl") << R"({"text": "ok"})" << "\n" << R"({"txt": "no"})" << "\n";
  CorpusSpec spec;
  spec.text_paths = {d + "/a.jsonl"};
  spec.out = d + "/out.u32";
  auto r = BuildCorpus(tok, "tiny.json", spec);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("a.jsonl:2"));
  EXPECT_THAT(r.status().message(), HasSubstr("\"text\""));

  std::ofstream(d + "/bad.txt") << "fine\xFF";
  spec.text_paths = {d + "/bad.txt"};
  r = BuildCorpus(tok, "tiny.json", spec);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("UTF-8"));

  spec.text_paths = {d + "/missing"};
  r = BuildCorpus(tok, "tiny.json", spec);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("missing"));
  EXPECT_FALSE(fs::exists(spec.out));  // nothing half-written under the final name

  // A vocabulary past uint16 needs a .u32 file.
  json big = ByteLevelJson();
  big["added_tokens"].push_back({{"id", 70000}, {"content", "<big>"}, {"special", true}, {"normalized", false}});
  auto wide = Tokenizer::FromJson(big.dump(), "big.json");
  ASSERT_TRUE(wide.ok());
  spec.out = d + "/out.bin";
  spec.text_paths = {d + "/a.jsonl"};
  r = BuildCorpus(*wide, "big.json", spec);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr(".u32"));
}

}  // namespace
}  // namespace hilnas::tokenizer
