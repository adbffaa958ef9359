// Small hand-made tokenizer.json files for the tokenizer tests.
#ifndef HILNAS_TOKENIZER_TEST_TOKENIZERS_H_
#define HILNAS_TOKENIZER_TEST_TOKENIZERS_H_

#include <string>

#include <nlohmann/json.hpp>

namespace hilnas::tokenizer {

// A byte-level BPE over a tiny vocabulary: every byte, then "ab", "abc",
// "Ġa" (" a") and "Ġab"; <|bos|> (260, special, added by the template) and
// <tag> (261, strips spaces both sides).
inline nlohmann::json ByteLevelJson() {
  nlohmann::json vocab = nlohmann::json::object();
  // GPT-2's byte map: printable bytes map to themselves; space is U+0120.
  int next = 0;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    int cp = printable ? b : 256 + next++;
    std::string s;
    if (cp < 0x80) {
      s = std::string(1, static_cast<char>(cp));
    } else {
      s += static_cast<char>(0xC0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3F));
    }
    vocab[s] = b;
  }
  vocab["ab"] = 256;
  vocab["abc"] = 257;
  vocab["\xC4\xA0" "a"] = 258;
  vocab["\xC4\xA0" "ab"] = 259;
  nlohmann::json j;
  j["model"] = {{"type", "BPE"},
                {"vocab", vocab},
                {"merges", nlohmann::json::array({"\xC4\xA0 a", "\xC4\xA0" "a b", "a b", "ab c"})}};
  j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["added_tokens"] = nlohmann::json::array(
      {{{"id", 260}, {"content", "<|bos|>"}, {"special", true}, {"normalized", false}},
       {{"id", 261}, {"content", "<tag>"}, {"special", false}, {"normalized", false},
        {"lstrip", true}, {"rstrip", true}}});
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", nlohmann::json::array({{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
      {"special_tokens", {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", {260}}, {"tokens", {"<|bos|>"}}}}}}};
  return j;
}

}  // namespace hilnas::tokenizer

#endif  // HILNAS_TOKENIZER_TEST_TOKENIZERS_H_
