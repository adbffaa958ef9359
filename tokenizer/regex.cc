#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace hilnas::tokenizer {
namespace {

// Unicode's White_Space property: Oniguruma's `\s` in UTF-8 mode. PCRE2's
// UCP `\s` also matches U+180E (MONGOLIAN VOWEL SEPARATOR, no longer a space
// since Unicode 6.3), so the patterns say exactly what they mean.
constexpr char kWhiteSpaceRanges[] =
    "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}";

std::string PcreError(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// One match-data block and JIT stack per thread, reused across calls.
struct ThreadMatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  ThreadMatchState() {
    data = pcre2_match_data_create(1, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
};

ThreadMatchState& MatchState() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

absl::StatusOr<std::string> Regex::Rewrite(absl::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        if (in_class) {
          out += kWhiteSpaceRanges;
        } else {
          absl::StrAppend(&out, "[", kWhiteSpaceRanges, "]");
        }
      } else if (e == 'S') {
        if (in_class) {
          return absl::InvalidArgumentError(absl::StrCat(
              "regex \"", pattern, "\": \\S inside a character class is not supported"));
        }
        absl::StrAppend(&out, "[^", kWhiteSpaceRanges, "]");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      return absl::InvalidArgumentError(
          absl::StrCat("regex \"", pattern, "\": POSIX classes are not supported"));
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const Regex>> Regex::Compile(absl::string_view pattern,
                                                            bool literal) {
  std::string source(pattern);
  if (!literal) {
    auto rewritten = Rewrite(pattern);
    if (!rewritten.ok()) return rewritten.status();
    source = *std::move(rewritten);
  }
  int error = 0;
  PCRE2_SIZE offset = 0;
  uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("regex \"", pattern, "\" does not compile: ",
                                                   PcreError(error), " at offset ", offset));
  }
  // The JIT is an optimisation; without it (an exotic CPU) matching still works.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  std::shared_ptr<Regex> regex(new Regex());
  regex->pattern_ = std::string(pattern);
  regex->code_ = code;
  return std::shared_ptr<const Regex>(std::move(regex));
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

absl::Status Regex::FindAll(absl::string_view text,
                            std::vector<std::pair<size_t, size_t>>* matches) const {
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadMatchState& state = MatchState();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, state.data,
                         state.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("regex \"", pattern_, "\" failed at byte ", start, ": ", PcreError(rc)));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
    size_t match_start = ovector[0], match_end = ovector[1];
    matches->emplace_back(match_start, match_end);
    if (match_end > match_start) {
      start = match_end;
    } else {
      // An empty match: step over one whole character.
      start = match_end + 1;
      while (start < text.size() && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) {
        ++start;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace hilnas::tokenizer
