// The split regexes of tokenizer.json pre-tokenizers, run by PCRE2 (Debian's
// libpcre2-dev) in UTF + UCP mode with its JIT. Hugging Face's Rust library
// runs them with Oniguruma; the two agree on every construct these patterns
// use (\p{L}, \p{N}, case-insensitive groups, lookahead, counted repeats)
// except `\s`, which PCRE2 widens by U+180E: Rewrite() spells `\s` and `\S`
// out as Unicode's White_Space set, Oniguruma's definition.
#ifndef HILNAS_TOKENIZER_REGEX_H_
#define HILNAS_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hilnas::tokenizer {

class Regex {
 public:
  // `literal`: the pattern is a plain string (tokenizer.json's
  // {"String": ...} patterns), matched as is.
  static absl::StatusOr<std::shared_ptr<const Regex>> Compile(absl::string_view pattern,
                                                              bool literal);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends [start, end) of every non-overlapping match in `text`, leftmost
  // first, as Oniguruma's find_iter gives them. `text` must be valid UTF-8.
  absl::Status FindAll(absl::string_view text,
                       std::vector<std::pair<size_t, size_t>>* matches) const;

  const std::string& pattern() const { return pattern_; }

  // Oniguruma's `\s` / `\S` as explicit classes (exposed for the test).
  static absl::StatusOr<std::string> Rewrite(absl::string_view pattern);

 private:
  Regex() = default;
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

}  // namespace hilnas::tokenizer

#endif  // HILNAS_TOKENIZER_REGEX_H_
