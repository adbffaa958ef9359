#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <tuple>
#include <deque>
#include <filesystem>
#include <utility>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tokenizer/regex.h"
#include "tokenizer/sentencepiece_model.h"
#include "util/secrets.h"
#include "util/textproto.h"

namespace hilnas::tokenizer {

using json = nlohmann::json;

namespace {

// ---------------------------------------------------------------------------
// UTF-8

// What a lead byte promises: the sequence length and the range of the
// second byte (Unicode's Table 3-7, well-formed UTF-8 byte sequences).
// Returns false for a byte that cannot start a multi-byte sequence.
bool LeadByte(unsigned char b0, size_t* need, unsigned char* lo, unsigned char* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    *need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    *need = 3;
    if (b0 == 0xE0) *lo = 0xA0;
    if (b0 == 0xED) *hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    *need = 4;
    if (b0 == 0xF0) *lo = 0x90;
    if (b0 == 0xF4) *hi = 0x8F;
  } else {
    return false;
  }
  return true;
}

// How many bytes of text[i..] form the longest prefix of a valid sequence
// (at least 1); the whole sequence when it is complete.
size_t ValidPrefix(absl::string_view text, size_t i, size_t* need) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  unsigned char lo, hi;
  if (byte(i) < 0x80) {
    *need = 1;
    return 1;
  }
  if (!LeadByte(byte(i), need, &lo, &hi)) {
    *need = 0;
    return 1;
  }
  size_t k = 1;
  if (i + k < text.size() && byte(i + k) >= lo && byte(i + k) <= hi) {
    ++k;
    while (k < *need && i + k < text.size() && byte(i + k) >= 0x80 && byte(i + k) <= 0xBF) ++k;
  }
  return k;
}

// Length of the valid sequence at text[i], or 0 when it is not one.
size_t ValidSequenceAt(absl::string_view text, size_t i) {
  size_t need = 0;
  size_t have = ValidPrefix(text, i, &need);
  return have == need ? need : 0;
}

// Rust's String::from_utf8_lossy: each "maximal subpart" of an invalid
// sequence becomes one U+FFFD.
std::string Utf8Lossy(absl::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    size_t n = ValidSequenceAt(bytes, i);
    if (n > 0) {
      out.append(bytes.data() + i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      size_t need = 0;
      i += ValidPrefix(bytes, i, &need);
    }
  }
  return out;
}

// Decodes the code point at text[*i] (valid UTF-8) and advances *i.
int32_t NextCodePoint(absl::string_view text, size_t* i) {
  utf8proc_int32_t cp = 0;
  auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + *i),
                            static_cast<utf8proc_ssize_t>(text.size() - *i), &cp);
  *i += n > 0 ? static_cast<size_t>(n) : 1;
  return cp;
}

void AppendCodePoint(int32_t cp, std::string* out) {
  utf8proc_uint8_t buffer[4];
  auto n = utf8proc_encode_char(cp, buffer);
  out->append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

// Rust's char::is_whitespace: Unicode White_Space.
bool IsWhiteSpace(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

// Rust's char::is_alphanumeric, by general category (letters, marks that
// are Alphabetic are not distinguished: used only for `single_word`).
bool IsAlphanumeric(int32_t cp) {
  switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// Where the code point that ends at text[end - 1] starts. REQUIRES: end > 0.
size_t PrevCodePointStart(absl::string_view text, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<unsigned char>(text[i]) & 0xC0) == 0x80) --i;
  return i;
}

// The code point at text[i], without moving i.
int32_t CodePointAt(absl::string_view text, size_t i) { return NextCodePoint(text, &i); }

// The last code point of `text`, or -1 when it is empty.
int32_t LastCodePoint(absl::string_view text) {
  return text.empty() ? -1 : CodePointAt(text, PrevCodePointStart(text, text.size()));
}

// The one code point `s` holds, or nullopt when it holds none or several.
std::optional<int32_t> SingleCodePoint(absl::string_view s) {
  if (s.empty()) return std::nullopt;
  size_t i = 0;
  int32_t cp = NextCodePoint(s, &i);
  if (i != s.size()) return std::nullopt;
  return cp;
}

// ---------------------------------------------------------------------------
// GPT-2's byte <-> printable character map (bytes_to_unicode): the alphabet
// of byte-level BPE vocabularies.

struct ByteMap {
  std::array<int32_t, 256> byte_to_cp;
  absl::flat_hash_map<int32_t, uint8_t> cp_to_byte;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      byte_to_cp[b] = printable ? b : 256 + n++;
      cp_to_byte[byte_to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMap& Bytes() {
  static const ByteMap* map = new ByteMap();
  return *map;
}

// "Ġthe" -> " the"; nullopt when a character is outside the map.
std::optional<std::string> ByteLevelToBytes(absl::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    int32_t cp = NextCodePoint(token, &i);
    auto it = Bytes().cp_to_byte.find(cp);
    if (it == Bytes().cp_to_byte.end()) return std::nullopt;
    out += static_cast<char>(it->second);
  }
  return out;
}


// ---------------------------------------------------------------------------
// Pipeline pieces, as tokenizer.json describes them.

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
enum class PrependScheme { kAlways, kFirst, kNever };

struct Normalizer {
  enum Kind { kNfc, kNfd, kNfkc, kNfkd, kReplace, kPrepend, kStrip } kind;
  std::string pattern;  // kReplace
  std::string content;  // kReplace, kPrepend
  bool left = false, right = false;  // kStrip
};

struct PreTokenizer {
  enum Kind { kSplit, kByteLevel, kMetaspace, kDigits } kind;
  std::shared_ptr<const Regex> regex;  // kSplit, kByteLevel with use_regex, kDigits
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // kByteLevel
  std::string replacement;        // kMetaspace
  PrependScheme prepend = PrependScheme::kAlways;
  bool split = true;
};

struct Decoder {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip, kMetaspace } kind;
  std::string pattern, content;
  int start = 0, stop = 0;
  int32_t replacement_cp = 0x2581;
  PrependScheme prepend = PrependScheme::kAlways;
};

struct AddedToken {
  int32_t id;
  std::string content;
  bool special, normalized, lstrip, rstrip, single_word;
};

// Leftmost-longest matching of added tokens (aho-corasick's LeftmostLongest
// as the Rust library uses it): a byte trie walked from each position.
class AddedTrie {
 public:
  void Add(absl::string_view content, int index) {
    if (content.empty()) return;
    int node = 0;
    for (unsigned char c : content) {
      auto key = (static_cast<uint64_t>(node) << 8) | c;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        terminal_.push_back(-1);
        it = edges_.emplace(key, static_cast<int>(terminal_.size() - 1)).first;
      }
      node = it->second;
    }
    if (terminal_[node] < 0) terminal_[node] = index;
    first_[static_cast<unsigned char>(content[0])] = true;
  }
  bool empty() const { return terminal_.size() <= 1; }
  // The longest token starting at text[i]: (index, end) or index -1.
  std::pair<int, size_t> LongestAt(absl::string_view text, size_t i) const {
    std::pair<int, size_t> best{-1, i};
    if (!first_[static_cast<unsigned char>(text[i])]) return best;
    int node = 0;
    for (size_t k = i; k < text.size(); ++k) {
      auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[k]));
      if (it == edges_.end()) break;
      node = it->second;
      if (terminal_[node] >= 0) best = {terminal_[node], k + 1};
    }
    return best;
  }

 private:
  absl::flat_hash_map<uint64_t, int> edges_;
  std::vector<int> terminal_{-1};
  std::array<bool, 256> first_{};
};

// A stretch of text, or an added token found in it.
struct Segment {
  size_t start, end;
  int added = -1;  // index into added_, or -1 for text
};

struct Piece {
  absl::string_view text;
  bool at_origin;  // starts at offset 0 of the encoded text (Metaspace's "first")
};

uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

std::atomic<uint64_t> next_serial{1};

}  // namespace

// ---------------------------------------------------------------------------

struct TokenizerImpl {
  std::string name;  // file name, for messages
  std::string fingerprint;
  std::vector<Normalizer> normalizers;
  std::vector<PreTokenizer> pre_tokenizers;
  std::vector<Decoder> decoders;
  bool has_decoder = false;
  std::vector<int32_t> template_before, template_after;  // post-processor, single sequence

  // BPE model.
  bool byte_level = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  bool fuse_unk = false;
  std::optional<int32_t> unk_id;
  absl::flat_hash_map<std::string, int32_t> vocab;  // raw bytes (byte-level) or UTF-8
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // pair -> (rank, new id)
  std::vector<std::pair<int32_t, int32_t>> merge_list;                // in rank order
  std::array<int32_t, 256> byte_ids;  // byte-level: the byte's token; fallback: <0xXX>
  std::string split_regex;

  std::vector<std::string> id_to_token;
  std::vector<TokenType> types;
  absl::flat_hash_map<std::string, int32_t> token_to_id;  // as spelled, model + added
  std::vector<AddedToken> added;
  absl::flat_hash_set<int32_t> special_ids;
  AddedTrie raw_trie, normalized_trie;
  std::optional<int32_t> bos, eos;
  bool adds_bos = false, adds_eos = false;
  uint64_t serial = next_serial.fetch_add(1);

  // A SentencePiece tokenizer.model, run by Google's library: when set,
  // Encode and Decode go to it and the fields above describe its vocabulary.
  std::unique_ptr<internal::SentencePieceModel> spm;
  std::optional<SentencePieceInfo> spm_info;

  absl::Status Load(const json& root, const json* config);
  absl::Status LoadModel(const json& model);
  absl::Status LoadNormalizer(const json& node, const std::string& where);
  absl::Status LoadPreTokenizer(const json& node, const std::string& where);
  absl::Status LoadDecoder(const json& node, const std::string& where);
  absl::Status LoadPostProcessor(const json& node, const std::string& where);

  std::vector<Segment> SplitAdded(absl::string_view text, const AddedTrie& trie) const;
  std::string Normalize(absl::string_view text) const;
  absl::Status PreTokenize(absl::string_view text, bool at_origin, std::deque<std::string>* arena,
                           std::vector<Piece>* pieces) const;
  absl::Status EncodeWord(absl::string_view word, std::vector<int32_t>* out) const;
  absl::Status MergeWord(absl::string_view word, std::vector<int32_t>* out) const;
  absl::Status EncodeText(absl::string_view text, bool at_origin, std::vector<int32_t>* out) const;
};

namespace {

absl::Status FieldError(const std::string& name, const std::string& where,
                        absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", where, ": ", what));
}

bool GetBool(const json& node, const char* key, bool fallback) {
  auto it = node.find(key);
  if (it == node.end() || !it->is_boolean()) return fallback;
  return it->get<bool>();
}

// {"String": "x"} or {"Regex": "y"} -> (text, literal).
absl::StatusOr<std::pair<std::string, bool>> Pattern(const json& node, const std::string& name,
                                                     const std::string& where) {
  if (!node.is_object()) return FieldError(name, where + ".pattern", "must be an object");
  if (node.contains("String") && node["String"].is_string()) {
    return std::make_pair(node["String"].get<std::string>(), true);
  }
  if (node.contains("Regex") && node["Regex"].is_string()) {
    return std::make_pair(node["Regex"].get<std::string>(), false);
  }
  return FieldError(name, where + ".pattern", "needs a \"String\" or \"Regex\"");
}

absl::StatusOr<PrependScheme> ParsePrependScheme(const json& node, const std::string& name,
                                                 const std::string& where) {
  if (node.contains("prepend_scheme") && node["prepend_scheme"].is_string()) {
    std::string s = node["prepend_scheme"].get<std::string>();
    if (s == "always") return PrependScheme::kAlways;
    if (s == "first") return PrependScheme::kFirst;
    if (s == "never") return PrependScheme::kNever;
    return FieldError(name, where + ".prepend_scheme", absl::StrCat("unknown value \"", s, "\""));
  }
  // Older files: add_prefix_space.
  return GetBool(node, "add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
}

std::string TypeOf(const json& node) {
  auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Loads each member of a Sequence's list `key` with `load`.
template <typename Load>
absl::Status LoadEach(const json& node, const char* key, const std::string& name,
                      const std::string& where, Load load) {
  if (!node.contains(key) || !node[key].is_array()) {
    return FieldError(name, absl::StrCat(where, ".", key), "must be a list");
  }
  for (size_t i = 0; i < node[key].size(); ++i) {
    if (auto status = load(node[key][i], absl::StrCat(where, ".", key, "[", i, "]")); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

std::string ReplaceAll(const std::string& s, const std::string& pattern, const std::string& content) {
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    size_t hit = s.find(pattern, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += content;
    pos = hit + pattern.size();
  }
  out.append(s, pos, std::string::npos);
  return out;
}

}  // namespace

absl::Status TokenizerImpl::LoadNormalizer(const json& node, const std::string& where) {
  if (node.is_null()) return absl::OkStatus();
  std::string type = TypeOf(node);
  if (type == "Sequence") {
    return LoadEach(node, "normalizers", name, where,
                    [&](const json& member, const std::string& at) { return LoadNormalizer(member, at); });
  }
  Normalizer n{};
  if (type == "NFC") {
    n.kind = Normalizer::kNfc;
  } else if (type == "NFD") {
    n.kind = Normalizer::kNfd;
  } else if (type == "NFKC") {
    n.kind = Normalizer::kNfkc;
  } else if (type == "NFKD") {
    n.kind = Normalizer::kNfkd;
  } else if (type == "Replace") {
    auto pattern = Pattern(node.value("pattern", json()), name, where);
    if (!pattern.ok()) return pattern.status();
    if (!pattern->second) {
      return FieldError(name, where, "a Replace normalizer with a Regex pattern is not supported");
    }
    n.kind = Normalizer::kReplace;
    n.pattern = pattern->first;
    if (n.pattern.empty()) return FieldError(name, where + ".pattern", "is empty");
    n.content = node.value("content", "");
  } else if (type == "Prepend") {
    n.kind = Normalizer::kPrepend;
    n.content = node.value("prepend", "");
  } else if (type == "Strip") {
    n.kind = Normalizer::kStrip;
    n.left = GetBool(node, "strip_left", false);
    n.right = GetBool(node, "strip_right", false);
  } else {
    return FieldError(name, where,
                      absl::StrCat("normalizer \"", type,
                                   "\" is not supported (NFC, NFD, NFKC, NFKD, Replace, Prepend, "
                                   "Strip and Sequence are)"));
  }
  normalizers.push_back(std::move(n));
  return absl::OkStatus();
}

absl::Status TokenizerImpl::LoadPreTokenizer(const json& node, const std::string& where) {
  if (node.is_null()) return absl::OkStatus();
  std::string type = TypeOf(node);
  if (type == "Sequence") {
    return LoadEach(node, "pretokenizers", name, where,
                    [&](const json& member, const std::string& at) { return LoadPreTokenizer(member, at); });
  }
  if (!pre_tokenizers.empty() && pre_tokenizers.back().kind == PreTokenizer::kByteLevel) {
    return FieldError(name, where,
                      "a pre-tokenizer after ByteLevel (which would see mapped bytes) is not supported");
  }
  PreTokenizer p{};
  if (type == "Split") {
    auto pattern = Pattern(node.value("pattern", json()), name, where);
    if (!pattern.ok()) return pattern.status();
    auto regex = Regex::Compile(pattern->first, pattern->second);
    if (!regex.ok()) return FieldError(name, where + ".pattern", regex.status().message());
    p.kind = PreTokenizer::kSplit;
    p.regex = *std::move(regex);
    p.invert = GetBool(node, "invert", false);
    std::string behavior = node.value("behavior", "");
    if (behavior == "Removed") {
      p.behavior = SplitBehavior::kRemoved;
    } else if (behavior == "Isolated") {
      p.behavior = SplitBehavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      p.behavior = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      p.behavior = SplitBehavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      p.behavior = SplitBehavior::kContiguous;
    } else {
      return FieldError(name, where + ".behavior", absl::StrCat("unknown value \"", behavior, "\""));
    }
    if (!pattern->second && split_regex.empty()) split_regex = pattern->first;
  } else if (type == "ByteLevel") {
    p.kind = PreTokenizer::kByteLevel;
    p.add_prefix_space = GetBool(node, "add_prefix_space", true);
    if (GetBool(node, "use_regex", true)) {
      auto regex = Regex::Compile(kGpt2SplitRegex, false);
      if (!regex.ok()) return regex.status();
      p.regex = *std::move(regex);
      if (split_regex.empty()) split_regex = kGpt2SplitRegex;
    }
    byte_level = true;
  } else if (type == "Metaspace") {
    p.kind = PreTokenizer::kMetaspace;
    p.replacement = node.value("replacement", "\xE2\x96\x81");
    auto scheme = ParsePrependScheme(node, name, where);
    if (!scheme.ok()) return scheme.status();
    p.prepend = *scheme;
    p.split = GetBool(node, "split", true);
    if (!SingleCodePoint(p.replacement)) {
      return FieldError(name, where + ".replacement", "must be one character");
    }
  } else if (type == "Digits") {
    p.kind = PreTokenizer::kDigits;
    auto regex = Regex::Compile("\\p{N}", false);
    if (!regex.ok()) return regex.status();
    p.regex = *std::move(regex);
    p.behavior = GetBool(node, "individual_digits", false) ? SplitBehavior::kIsolated
                                                           : SplitBehavior::kContiguous;
  } else {
    return FieldError(name, where,
                      absl::StrCat("pre-tokenizer \"", type,
                                   "\" is not supported (Split, ByteLevel, Metaspace, Digits and "
                                   "Sequence are)"));
  }
  pre_tokenizers.push_back(std::move(p));
  return absl::OkStatus();
}

absl::Status TokenizerImpl::LoadDecoder(const json& node, const std::string& where) {
  if (node.is_null()) return absl::OkStatus();
  has_decoder = true;
  std::string type = TypeOf(node);
  if (type == "Sequence") {
    return LoadEach(node, "decoders", name, where,
                    [&](const json& member, const std::string& at) { return LoadDecoder(member, at); });
  }
  Decoder d{};
  if (type == "ByteLevel") {
    d.kind = Decoder::kByteLevel;
  } else if (type == "Replace") {
    auto pattern = Pattern(node.value("pattern", json()), name, where);
    if (!pattern.ok()) return pattern.status();
    if (!pattern->second || pattern->first.empty()) {
      return FieldError(name, where, "a Replace decoder needs a non-empty String pattern");
    }
    d.kind = Decoder::kReplace;
    d.pattern = pattern->first;
    d.content = node.value("content", "");
  } else if (type == "ByteFallback") {
    d.kind = Decoder::kByteFallback;
  } else if (type == "Fuse") {
    d.kind = Decoder::kFuse;
  } else if (type == "Strip") {
    d.kind = Decoder::kStrip;
    d.content = node.value("content", " ");
    d.start = node.value("start", 0);
    d.stop = node.value("stop", 0);
    std::optional<int32_t> cp = SingleCodePoint(d.content);
    if (!cp || d.start < 0 || d.stop < 0) {
      return FieldError(name, where, "Strip needs one content character and counts >= 0");
    }
    d.replacement_cp = *cp;
  } else if (type == "Metaspace") {
    d.kind = Decoder::kMetaspace;
    std::optional<int32_t> cp = SingleCodePoint(node.value("replacement", "\xE2\x96\x81"));
    if (!cp) return FieldError(name, where + ".replacement", "must be one character");
    d.replacement_cp = *cp;
    auto scheme = ParsePrependScheme(node, name, where);
    if (!scheme.ok()) return scheme.status();
    d.prepend = *scheme;
  } else {
    return FieldError(name, where,
                      absl::StrCat("decoder \"", type,
                                   "\" is not supported (ByteLevel, Replace, ByteFallback, Fuse, "
                                   "Strip, Metaspace and Sequence are)"));
  }
  decoders.push_back(std::move(d));
  return absl::OkStatus();
}

absl::Status TokenizerImpl::LoadPostProcessor(const json& node, const std::string& where) {
  if (node.is_null()) return absl::OkStatus();
  std::string type = TypeOf(node);
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only; ids unchanged
  if (type == "Sequence") {
    return LoadEach(node, "processors", name, where,
                    [&](const json& member, const std::string& at) { return LoadPostProcessor(member, at); });
  }
  if (type != "TemplateProcessing") {
    return FieldError(name, where,
                      absl::StrCat("post-processor \"", type,
                                   "\" is not supported (TemplateProcessing, ByteLevel and "
                                   "Sequence are)"));
  }
  if (!template_before.empty() || !template_after.empty()) {
    return FieldError(name, where, "two TemplateProcessing post-processors");
  }
  const json& single = node.value("single", json::array());
  const json& specials = node.value("special_tokens", json::object());
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const json& item = single[i];
    std::string item_where = absl::StrCat(where, ".single[", i, "]");
    if (item.contains("Sequence")) {
      if (item["Sequence"].value("id", "") != "A") {
        return FieldError(name, item_where, "a single template may only hold sequence A");
      }
      seen_sequence = true;
      continue;
    }
    if (!item.contains("SpecialToken")) {
      return FieldError(name, item_where, "needs \"Sequence\" or \"SpecialToken\"");
    }
    std::string id = item["SpecialToken"].value("id", "");
    if (!specials.contains(id) || !specials[id].contains("ids") || !specials[id]["ids"].is_array()) {
      return FieldError(name, item_where,
                        absl::StrCat("special token \"", id, "\" is not in special_tokens"));
    }
    for (const json& value : specials[id]["ids"]) {
      if (!value.is_number_integer()) return FieldError(name, item_where, "ids must be integers");
      (seen_sequence ? template_after : template_before).push_back(value.get<int32_t>());
    }
  }
  return absl::OkStatus();
}

absl::Status TokenizerImpl::LoadModel(const json& model) {
  const std::string where = "model";
  if (!model.is_object()) return FieldError(name, where, "missing or not an object");
  std::string type = TypeOf(model);
  if (type.empty() && model.contains("merges")) type = "BPE";
  if (type != "BPE") {
    return FieldError(name, where + ".type",
                      absl::StrCat("model \"", type,
                                   "\" is not supported: hilnas reproduces BPE models only "
                                   "(Unigram, WordPiece and WordLevel are refused)"));
  }
  if (!model.value("dropout", json()).is_null() &&
      model["dropout"].is_number() && model["dropout"].get<double>() != 0.0) {
    return FieldError(name, where + ".dropout", "BPE dropout is random; refused");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty()) {
      return FieldError(name, where + "." + key, "a non-empty value is not supported");
    }
  }
  byte_fallback = GetBool(model, "byte_fallback", false);
  ignore_merges = GetBool(model, "ignore_merges", false);
  fuse_unk = GetBool(model, "fuse_unk", false);
  if (!model.contains("vocab") || !model["vocab"].is_object()) {
    return FieldError(name, where + ".vocab", "missing or not an object");
  }
  absl::flat_hash_map<std::string, int32_t> spelled;
  spelled.reserve(model["vocab"].size());
  int32_t max_id = -1;
  for (auto it = model["vocab"].begin(); it != model["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > (1 << 30)) {
      return FieldError(name, absl::StrCat(where, ".vocab[\"", it.key(), "\"]"),
                        "id must be an integer in [0, 2^30]");
    }
    int32_t id = it.value().get<int32_t>();
    spelled[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  id_to_token.assign(static_cast<size_t>(max_id + 1), std::string());
  types.assign(static_cast<size_t>(max_id + 1), TokenType::kUnused);
  for (const auto& [token, id] : spelled) {
    if (!id_to_token[id].empty()) {
      return FieldError(name, where + ".vocab", absl::StrCat("id ", id, " is used twice"));
    }
    id_to_token[id] = token;
    types[id] = TokenType::kNormal;
  }
  // The vocabulary in the alphabet the BPE works in: raw bytes for a
  // byte-level model, UTF-8 otherwise.
  vocab.reserve(spelled.size());
  for (const auto& [token, id] : spelled) {
    if (byte_level) {
      auto bytes = ByteLevelToBytes(token);
      vocab.emplace(bytes ? *bytes : token, id);
    } else {
      vocab.emplace(token, id);
    }
  }
  byte_ids.fill(-1);
  for (int b = 0; b < 256; ++b) {
    if (byte_level) {
      auto it = vocab.find(std::string(1, static_cast<char>(b)));
      if (it != vocab.end()) byte_ids[b] = it->second;
    } else if (byte_fallback) {
      auto it = spelled.find(absl::StrFormat("<0x%02X>", b));
      if (it != spelled.end()) {
        byte_ids[b] = it->second;
        types[it->second] = TokenType::kByte;
      }
    }
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    std::string unk = model["unk_token"].get<std::string>();
    auto it = spelled.find(unk);
    if (it == spelled.end()) {
      return FieldError(name, where + ".unk_token", absl::StrCat("\"", unk, "\" is not in the vocabulary"));
    }
    unk_id = it->second;
    types[it->second] = TokenType::kUnknown;
  }
  if (!model.contains("merges") || !model["merges"].is_array()) {
    return FieldError(name, where + ".merges", "missing or not a list");
  }
  const json& list = model["merges"];
  merges.reserve(list.size());
  merge_list.reserve(list.size());
  for (size_t rank = 0; rank < list.size(); ++rank) {
    const json& entry = list[rank];
    std::string left, right;
    if (entry.is_string()) {
      std::vector<std::string> parts = absl::StrSplit(entry.get<std::string>(), ' ');
      if (parts.size() != 2) {
        return FieldError(name, absl::StrCat(where, ".merges[", rank, "]"),
                          "must be two tokens separated by one space");
      }
      left = parts[0];
      right = parts[1];
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
      left = entry[0].get<std::string>();
      right = entry[1].get<std::string>();
    } else {
      return FieldError(name, absl::StrCat(where, ".merges[", rank, "]"),
                        "must be \"a b\" or [\"a\", \"b\"]");
    }
    auto a = spelled.find(left), b = spelled.find(right), c = spelled.find(left + right);
    if (a == spelled.end() || b == spelled.end() || c == spelled.end()) {
      return FieldError(name, absl::StrCat(where, ".merges[", rank, "]"),
                        absl::StrCat("\"", left, "\" + \"", right, "\" is not in the vocabulary"));
    }
    merges.insert_or_assign(PairKey(a->second, b->second),
                            std::make_pair(static_cast<int32_t>(rank), c->second));
    merge_list.emplace_back(a->second, b->second);
  }
  return absl::OkStatus();
}

absl::Status TokenizerImpl::Load(const json& root, const json* config) {
  if (!root.is_object()) return FieldError(name, "top level", "must be a JSON object");
  // Pre-tokenizers first: they say whether the vocabulary is byte-level.
  if (auto s = LoadPreTokenizer(root.value("pre_tokenizer", json()), "pre_tokenizer"); !s.ok()) {
    return s;
  }
  if (auto s = LoadNormalizer(root.value("normalizer", json()), "normalizer"); !s.ok()) return s;
  if (auto s = LoadModel(root.value("model", json())); !s.ok()) return s;
  if (auto s = LoadDecoder(root.value("decoder", json()), "decoder"); !s.ok()) return s;
  if (auto s = LoadPostProcessor(root.value("post_processor", json()), "post_processor"); !s.ok()) {
    return s;
  }
  const json& tokens = root.value("added_tokens", json::array());
  if (!tokens.is_array()) return FieldError(name, "added_tokens", "must be a list");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const json& t = tokens[i];
    std::string where = absl::StrCat("added_tokens[", i, "]");
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return FieldError(name, where, "needs an integer \"id\" and a string \"content\"");
    }
    AddedToken a{t["id"].get<int32_t>(), t["content"].get<std::string>(),
                 GetBool(t, "special", false), GetBool(t, "normalized", true),
                 GetBool(t, "lstrip", false), GetBool(t, "rstrip", false),
                 GetBool(t, "single_word", false)};
    if (a.id < 0 || a.id > (1 << 30)) return FieldError(name, where + ".id", "out of range");
    if (a.content.empty()) return FieldError(name, where + ".content", "is empty");
    if (FirstInvalidUtf8(a.content)) return FieldError(name, where + ".content", "is not UTF-8");
    if (static_cast<size_t>(a.id) >= id_to_token.size()) {
      id_to_token.resize(a.id + 1);
      types.resize(a.id + 1, TokenType::kUnused);
    }
    id_to_token[a.id] = a.content;
    types[a.id] = a.special ? TokenType::kControl : TokenType::kUserDefined;
    if (a.special) special_ids.insert(a.id);
    int index = static_cast<int>(added.size());
    // A token the normalizer would change is matched on normalized text;
    // special tokens never are (the Rust library's AddedVocabulary).
    if (a.normalized && !a.special) {
      normalized_trie.Add(Normalize(a.content), index);
    } else {
      raw_trie.Add(a.content, index);
    }
    added.push_back(std::move(a));
  }
  for (size_t id = 0; id < id_to_token.size(); ++id) {
    if (!id_to_token[id].empty()) token_to_id.emplace(id_to_token[id], static_cast<int32_t>(id));
  }
  for (const auto* ids : {&template_before, &template_after}) {
    for (int32_t id : *ids) {
      if (id < 0 || static_cast<size_t>(id) >= id_to_token.size()) {
        return FieldError(name, "post_processor", absl::StrCat("special id ", id, " is out of range"));
      }
    }
  }
  adds_bos = !template_before.empty();
  adds_eos = !template_after.empty();
  if (adds_bos) bos = template_before.front();
  if (adds_eos) eos = template_after.back();
  // tokenizer_config.json names BOS/EOS when the template does not.
  if (config != nullptr && config->is_object()) {
    auto named = [&](const char* key) -> std::optional<int32_t> {
      auto it = config->find(key);
      if (it == config->end()) return std::nullopt;
      std::string content;
      if (it->is_string()) content = it->get<std::string>();
      else if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) content = (*it)["content"].get<std::string>();
      auto found = token_to_id.find(content);
      if (content.empty() || found == token_to_id.end()) return std::nullopt;
      return found->second;
    };
    if (!bos) bos = named("bos_token");
    if (!eos) eos = named("eos_token");
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Encoding.

std::vector<Segment> TokenizerImpl::SplitAdded(absl::string_view text,
                                               const AddedTrie& trie) const {
  std::vector<Segment> out;
  if (trie.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return out;
  }
  size_t start_offset = 0, i = 0;
  while (i < text.size()) {
    auto [index, end] = trie.LongestAt(text, i);
    if (index < 0) {
      ++i;
      continue;
    }
    const AddedToken& token = added[index];
    size_t start = i;
    size_t stop = end;
    i = end;
    if (token.single_word) {
      int32_t before = LastCodePoint(text.substr(0, start));
      int32_t after = stop < text.size() ? CodePointAt(text, stop) : -1;
      bool start_space = start == 0 || !IsAlphanumeric(before);
      bool stop_space = stop == text.size() || !IsAlphanumeric(after);
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      size_t new_start = start;
      while (new_start > 0) {
        size_t k = PrevCodePointStart(text, new_start);
        if (!IsWhiteSpace(CodePointAt(text, k))) break;
        new_start = k;
      }
      start = std::max(new_start, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size() && IsWhiteSpace(CodePointAt(text, stop))) {
        NextCodePoint(text, &stop);
      }
      i = std::max(i, stop);
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, index});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
  return out;
}

std::string TokenizerImpl::Normalize(absl::string_view text) const {
  std::string s(text);
  for (const Normalizer& n : normalizers) {
    switch (n.kind) {
      case Normalizer::kNfc:
      case Normalizer::kNfd:
      case Normalizer::kNfkc:
      case Normalizer::kNfkd: {
        if (std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; })) break;
        int options = UTF8PROC_STABLE;
        if (n.kind == Normalizer::kNfc) options |= UTF8PROC_COMPOSE;
        if (n.kind == Normalizer::kNfd) options |= UTF8PROC_DECOMPOSE;
        if (n.kind == Normalizer::kNfkc) options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
        if (n.kind == Normalizer::kNfkd) options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        utf8proc_uint8_t* mapped = nullptr;
        auto len = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                static_cast<utf8proc_ssize_t>(s.size()),
                                &mapped, static_cast<utf8proc_option_t>(options));
        if (len >= 0 && mapped != nullptr) s.assign(reinterpret_cast<char*>(mapped), len);
        std::free(mapped);
        break;
      }
      case Normalizer::kReplace:
        s = ReplaceAll(s, n.pattern, n.content);
        break;
      case Normalizer::kPrepend:
        if (!s.empty()) s = n.content + s;
        break;
      case Normalizer::kStrip: {
        size_t begin = 0, end = s.size();
        if (n.left) {
          while (begin < end) {
            size_t k = begin;
            if (!IsWhiteSpace(NextCodePoint(s, &k))) break;
            begin = k;
          }
        }
        if (n.right) {
          while (end > begin) {
            size_t k = PrevCodePointStart(s, end);
            if (!IsWhiteSpace(CodePointAt(s, k))) break;
            end = k;
          }
        }
        s = s.substr(begin, end - begin);
        break;
      }
    }
  }
  return s;
}

namespace {

// Splits `piece` at the regex's matches with one of tokenizer.json's
// behaviours, as the Rust library's NormalizedString::split does.
absl::Status SplitPiece(const PreTokenizer& p, const Piece& piece, std::vector<Piece>* out) {
  thread_local std::vector<std::pair<size_t, size_t>> found;
  found.clear();
  if (auto s = p.regex->FindAll(piece.text, &found); !s.ok()) return s;
  // (start, end, is_match) covering the whole piece.
  thread_local std::vector<std::tuple<size_t, size_t, bool>> parts;
  parts.clear();
  size_t prev = 0;
  for (auto [start, end] : found) {
    if (prev != start) parts.emplace_back(prev, start, false);
    parts.emplace_back(start, end, true);
    prev = end;
  }
  if (prev != piece.text.size()) parts.emplace_back(prev, piece.text.size(), false);
  if (p.invert) {
    for (auto& part : parts) std::get<2>(part) = !std::get<2>(part);
  }
  thread_local std::vector<std::pair<size_t, size_t>> kept;
  kept.clear();
  switch (p.behavior) {
    case SplitBehavior::kRemoved:
      for (auto [s, e, m] : parts) {
        if (!m) kept.emplace_back(s, e);
      }
      break;
    case SplitBehavior::kIsolated:
      for (auto [s, e, m] : parts) kept.emplace_back(s, e);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (auto [s, e, m] : parts) {
        if (m && !previous_match && !kept.empty()) {
          kept.back().second = e;
        } else {
          kept.emplace_back(s, e);
        }
        previous_match = m;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t k = parts.size(); k-- > 0;) {
        auto [s, e, m] = parts[k];
        if (m && !previous_match && !kept.empty()) {
          kept.back().first = s;
        } else {
          kept.emplace_back(s, e);
        }
        previous_match = m;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (auto [s, e, m] : parts) {
        if (m == previous_match && !kept.empty()) {
          kept.back().second = e;
        } else {
          kept.emplace_back(s, e);
        }
        previous_match = m;
      }
      break;
    }
  }
  for (auto [s, e] : kept) {
    if (s == e) continue;
    out->push_back({piece.text.substr(s, e - s), piece.at_origin && s == 0});
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TokenizerImpl::PreTokenize(absl::string_view text, bool at_origin,
                                        std::deque<std::string>* arena,
                                        std::vector<Piece>* pieces) const {
  pieces->clear();
  pieces->push_back({text, at_origin});
  std::vector<Piece> next;
  for (const PreTokenizer& p : pre_tokenizers) {
    next.clear();
    for (const Piece& piece : *pieces) {
      switch (p.kind) {
        case PreTokenizer::kSplit:
        case PreTokenizer::kDigits:
          if (auto s = SplitPiece(p, piece, &next); !s.ok()) return s;
          break;
        case PreTokenizer::kByteLevel: {
          Piece current = piece;
          if (p.add_prefix_space && (current.text.empty() || current.text[0] != ' ')) {
            arena->push_back(absl::StrCat(" ", current.text));
            current.text = arena->back();
          }
          if (p.regex) {
            if (auto s = SplitPiece(p, current, &next); !s.ok()) return s;
          } else if (!current.text.empty()) {
            next.push_back(current);
          }
          break;
        }
        case PreTokenizer::kMetaspace: {
          std::string replaced;
          replaced.reserve(piece.text.size() + 3);
          for (char c : piece.text) {
            if (c == ' ') {
              replaced += p.replacement;
            } else {
              replaced += c;
            }
          }
          bool starts = absl::string_view(replaced).substr(0, p.replacement.size()) == p.replacement;
          if (!starts && (p.prepend == PrependScheme::kAlways ||
                          (p.prepend == PrependScheme::kFirst && piece.at_origin))) {
            replaced = p.replacement + replaced;
          }
          arena->push_back(std::move(replaced));
          Piece current{arena->back(), piece.at_origin};
          if (p.split) {
            // Split on the replacement character, merged with what follows
            // (MergedWithNext): a piece starts at every occurrence but the first byte.
            absl::string_view s = current.text;
            size_t begin = 0;
            size_t k = s.find(p.replacement, 1);
            while (k != absl::string_view::npos) {
              next.push_back({s.substr(begin, k - begin), current.at_origin && begin == 0});
              begin = k;
              k = s.find(p.replacement, k + p.replacement.size());
            }
            if (begin < s.size()) next.push_back({s.substr(begin), current.at_origin && begin == 0});
          } else if (!current.text.empty()) {
            next.push_back(current);
          }
          break;
        }
      }
    }
    pieces->swap(next);
  }
  return absl::OkStatus();
}

namespace {

// A bounded per-thread cache of words already merged, as the Rust library
// keeps one (its MAX_LENGTH and capacity): memory is bounded by the
// vocabulary's word list, not by the text.
struct WordCache {
  uint64_t serial = 0;
  absl::flat_hash_map<std::string, std::vector<int32_t>> words;
};
constexpr size_t kCacheWordBytes = 256;
constexpr size_t kCacheCapacity = 20000;

WordCache& CacheFor(uint64_t serial) {
  thread_local WordCache cache;
  if (cache.serial != serial) {
    cache.words.clear();
    cache.serial = serial;
  }
  return cache;
}

struct Symbol {
  int32_t id;
  int32_t prev, next;
  bool alive;
};

struct MergeCandidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  // std::push_heap builds a max-heap: the lowest rank, then the leftmost
  // position, must compare greatest (the Rust library's Merge ordering).
  bool operator<(const MergeCandidate& o) const {
    if (rank != o.rank) return rank > o.rank;
    return pos > o.pos;
  }
};

}  // namespace

absl::Status TokenizerImpl::MergeWord(absl::string_view word, std::vector<int32_t>* out) const {
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<MergeCandidate> heap;
  symbols.clear();
  heap.clear();
  auto push_symbol = [&](int32_t id) {
    int32_t index = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, index - 1, -1, true});
    if (index > 0) symbols[index - 1].next = index;
  };
  bool last_unk = false;
  auto push_unknown = [&](absl::string_view what) -> absl::Status {
    if (!unk_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": \"", what, "\" has no token and the vocabulary has no unk_token"));
    }
    if (fuse_unk && last_unk) return absl::OkStatus();
    push_symbol(*unk_id);
    last_unk = true;
    return absl::OkStatus();
  };
  if (byte_level) {
    for (unsigned char b : word) {
      if (byte_ids[b] >= 0) {
        push_symbol(byte_ids[b]);
        last_unk = false;
      } else if (auto s = push_unknown(std::string(1, static_cast<char>(b))); !s.ok()) {
        return s;
      }
    }
  } else {
    size_t i = 0;
    while (i < word.size()) {
      size_t begin = i;
      NextCodePoint(word, &i);
      absl::string_view ch = word.substr(begin, i - begin);
      auto it = vocab.find(ch);
      if (it != vocab.end()) {
        push_symbol(it->second);
        last_unk = false;
        continue;
      }
      bool all_bytes = byte_fallback;
      if (byte_fallback) {
        for (unsigned char b : ch) all_bytes = all_bytes && byte_ids[b] >= 0;
      }
      if (all_bytes) {
        for (unsigned char b : ch) push_symbol(byte_ids[b]);
        last_unk = false;
      } else if (auto s = push_unknown(ch); !s.ok()) {
        return s;
      }
    }
  }
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    auto it = merges.find(PairKey(symbols[k].id, symbols[k + 1].id));
    if (it != merges.end()) {
      heap.push_back({it->second.first, static_cast<int32_t>(k), it->second.second});
    }
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    MergeCandidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    auto it = merges.find(PairKey(left.id, right.id));
    if (it == merges.end() || it->second.second != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) {
      auto m = merges.find(PairKey(symbols[left.prev].id, left.id));
      if (m != merges.end()) {
        heap.push_back({m->second.first, left.prev, m->second.second});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (left.next >= 0) {
      auto m = merges.find(PairKey(left.id, symbols[left.next].id));
      if (m != merges.end()) {
        heap.push_back({m->second.first, top.pos, m->second.second});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out->push_back(s.id);
  }
  return absl::OkStatus();
}

absl::Status TokenizerImpl::EncodeWord(absl::string_view word, std::vector<int32_t>* out) const {
  if (ignore_merges) {
    auto it = vocab.find(word);
    if (it != vocab.end()) {
      out->push_back(it->second);
      return absl::OkStatus();
    }
  }
  if (word.size() >= kCacheWordBytes) return MergeWord(word, out);
  WordCache& cache = CacheFor(serial);
  auto hit = cache.words.find(word);
  if (hit != cache.words.end()) {
    out->insert(out->end(), hit->second.begin(), hit->second.end());
    return absl::OkStatus();
  }
  size_t before = out->size();
  if (auto s = MergeWord(word, out); !s.ok()) return s;
  if (cache.words.size() >= kCacheCapacity) cache.words.clear();
  cache.words.emplace(std::string(word), std::vector<int32_t>(out->begin() + before, out->end()));
  return absl::OkStatus();
}

absl::Status TokenizerImpl::EncodeText(absl::string_view text, bool at_origin,
                                       std::vector<int32_t>* out) const {
  std::string normalized = normalizers.empty() ? std::string() : Normalize(text);
  absl::string_view view = normalizers.empty() ? text : absl::string_view(normalized);
  std::deque<std::string> arena;
  std::vector<Piece> pieces;
  for (const Segment& seg : SplitAdded(view, normalized_trie)) {
    if (seg.added >= 0) {
      out->push_back(added[seg.added].id);
      continue;
    }
    absl::string_view part = view.substr(seg.start, seg.end - seg.start);
    if (auto s = PreTokenize(part, at_origin && seg.start == 0, &arena, &pieces); !s.ok()) return s;
    for (const Piece& piece : pieces) {
      if (auto s = EncodeWord(piece.text, out); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------

std::optional<size_t> FirstInvalidUtf8(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII runs, eight bytes at a time.
    while (i + 8 <= text.size()) {
      uint64_t chunk;
      std::memcpy(&chunk, text.data() + i, 8);
      if (chunk & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= text.size()) break;
    size_t n = ValidSequenceAt(text, i);
    if (n == 0) return i;
    i += n;
  }
  return std::nullopt;
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

absl::StatusOr<Tokenizer> Tokenizer::FromJson(absl::string_view json_text, absl::string_view name,
                                              absl::string_view config_text) {
  auto impl = std::make_unique<TokenizerImpl>();
  impl->name = std::string(name);
  json root, config;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not valid JSON: ", e.what()));
  }
  if (!config_text.empty()) {
    try {
      config = json::parse(config_text.begin(), config_text.end());
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": its tokenizer_config.json is not valid JSON: ", e.what()));
    }
  }
  try {
    if (auto s = impl->Load(root, config_text.empty() ? nullptr : &config); !s.ok()) return s;
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": a field has the wrong type: ", e.what()));
  }
  impl->fingerprint = Sha256Hex(json_text);
  return Tokenizer(std::move(impl));
}


absl::StatusOr<Tokenizer> Tokenizer::FromFile(const std::string& json_path,
                                              const std::string& config_path) {
  std::string text, config;
  if (auto s = ReadFileToString(json_path, &text); !s.ok()) return s;
  if (!config_path.empty()) {
    if (auto s = ReadFileToString(config_path, &config); !s.ok()) return s;
  }
  if (absl::EndsWith(json_path, ".model")) return FromSentencePiece(text, json_path, config);
  return FromJson(text, json_path, config);
}

std::string Tokenizer::FileInDir(const std::string& dir) {
  // Looked up without opening: each file is opened once, to be read.
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    std::string path = dir + "/" + name;
    if (fs::is_regular_file(path, ec)) return path;
  }
  return "";
}

absl::StatusOr<Tokenizer> Tokenizer::FromDir(const std::string& dir) {
  const std::string path = FileInDir(dir);
  if (path.empty()) {
    return absl::NotFoundError(absl::StrCat(dir, ": no tokenizer.json or tokenizer.model"));
  }
  std::error_code ec;
  const std::string config_path = dir + "/tokenizer_config.json";
  return FromFile(path, std::filesystem::is_regular_file(config_path, ec) ? config_path : "");
}

absl::StatusOr<Tokenizer> Tokenizer::FromSentencePiece(const std::string& model_bytes,
                                                       absl::string_view name,
                                                       absl::string_view config_text) {
  auto impl = std::make_unique<TokenizerImpl>();
  impl->name = std::string(name);
  std::string error;
  impl->spm = internal::SentencePieceModel::Load(model_bytes, &error);
  if (impl->spm == nullptr) return absl::InvalidArgumentError(absl::StrCat(name, ": ", error));
  const internal::SentencePieceModel& m = *impl->spm;
  impl->byte_fallback = m.byte_fallback;
  impl->id_to_token = m.pieces;
  impl->types.reserve(m.types.size());
  for (size_t id = 0; id < m.pieces.size(); ++id) {
    const int32_t t = m.types[id];
    impl->types.push_back(t >= 1 && t <= 6 ? static_cast<TokenType>(t) : TokenType::kNormal);
    if (t == static_cast<int32_t>(TokenType::kControl)) impl->special_ids.insert(static_cast<int32_t>(id));
    impl->token_to_id.emplace(m.pieces[id], static_cast<int32_t>(id));
  }
  if (m.unk_id >= 0) impl->unk_id = m.unk_id;
  if (m.bos_id >= 0) impl->bos = m.bos_id;
  if (m.eos_id >= 0) impl->eos = m.eos_id;
  // Hugging Face's LlamaTokenizer convention: BOS added, EOS not, unless
  // tokenizer_config.json says otherwise.
  bool add_bos = true, add_eos = false;
  if (!config_text.empty()) {
    json config;
    try {
      config = json::parse(config_text.begin(), config_text.end());
    } catch (const json::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": its tokenizer_config.json is not valid JSON: ", e.what()));
    }
    if (config.is_object()) {
      add_bos = GetBool(config, "add_bos_token", add_bos);
      add_eos = GetBool(config, "add_eos_token", add_eos);
    }
  }
  if (add_bos && impl->bos) impl->template_before = {*impl->bos};
  if (add_eos && impl->eos) impl->template_after = {*impl->eos};
  impl->adds_bos = !impl->template_before.empty();
  impl->adds_eos = !impl->template_after.empty();
  using ModelType = internal::SentencePieceModel::ModelType;
  SentencePieceInfo& info = impl->spm_info.emplace();
  info.unigram = m.model_type == ModelType::kUnigram;
  info.model_type = m.model_type == ModelType::kUnigram ? "unigram"
                    : m.model_type == ModelType::kBpe   ? "bpe"
                    : m.model_type == ModelType::kWord  ? "word"
                                                        : "char";
  info.normalizer = m.normalizer_name.empty() && m.has_charsmap ? "precompiled" : m.normalizer_name;
  info.removes_extra_whitespaces = m.remove_extra_whitespaces;
  info.scores = m.scores;
  impl->fingerprint = Sha256Hex(model_bytes);
  return Tokenizer(std::move(impl));
}

absl::StatusOr<Tokenizer> Tokenizer::FromPath(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) return FromFile(path);
  return FromDir(path);
}

absl::StatusOr<std::vector<int32_t>> Tokenizer::Encode(absl::string_view text,
                                                       bool add_special_tokens) const {
  if (auto bad = FirstInvalidUtf8(text)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "text is not valid UTF-8: byte 0x%02X at offset %d", static_cast<unsigned char>(text[*bad]),
        *bad));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens) ids = impl_->template_before;
  if (impl_->spm != nullptr) {
    std::string error;
    if (!impl_->spm->Encode(std::string_view(text.data(), text.size()), &ids, &error)) {
      return absl::InternalError(absl::StrCat(impl_->name, ": SentencePiece: ", error));
    }
    if (add_special_tokens) ids.insert(ids.end(), impl_->template_after.begin(), impl_->template_after.end());
    return ids;
  }
  for (const Segment& seg : impl_->SplitAdded(text, impl_->raw_trie)) {
    if (seg.added >= 0) {
      ids.push_back(impl_->added[seg.added].id);
      continue;
    }
    if (auto s = impl_->EncodeText(text.substr(seg.start, seg.end - seg.start), seg.start == 0, &ids);
        !s.ok()) {
      return s;
    }
  }
  if (add_special_tokens) ids.insert(ids.end(), impl_->template_after.begin(), impl_->template_after.end());
  return ids;
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids,
                                              bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    int32_t id = ids[k];
    if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size() ||
        impl_->id_to_token[id].empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", id, " (position ", k, ") is not in the vocabulary of ", impl_->name));
    }
    if (skip_special_tokens && impl_->special_ids.contains(id)) continue;
    tokens.push_back(impl_->id_to_token[id]);
  }
  if (impl_->spm != nullptr) {
    // SentencePiece decodes control tokens to nothing, skipped or not.
    std::string text, error;
    if (!impl_->spm->Decode(ids, &text, &error)) {
      return absl::InternalError(absl::StrCat(impl_->name, ": SentencePiece: ", error));
    }
    return text;
  }
  if (!impl_->has_decoder) return absl::StrJoin(tokens, " ");
  for (const Decoder& d : impl_->decoders) {
    switch (d.kind) {
      case Decoder::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) {
          auto raw = ByteLevelToBytes(t);
          bytes += raw ? *raw : t;
        }
        tokens.assign(1, Utf8Lossy(bytes));
        break;
      }
      case Decoder::kReplace:
        for (std::string& t : tokens) t = ReplaceAll(t, d.pattern, d.content);
        break;
      case Decoder::kByteFallback: {
        std::vector<std::string> out;
        std::string pending;
        auto flush = [&] {
          if (pending.empty()) return;
          if (!FirstInvalidUtf8(pending)) {
            out.push_back(pending);
          } else {
            for (size_t k = 0; k < pending.size(); ++k) out.push_back("\xEF\xBF\xBD");
          }
          pending.clear();
        };
        for (std::string& t : tokens) {
          int value = 0;
          bool is_byte = t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
                         absl::SimpleHexAtoi(absl::string_view(t).substr(3, 2), &value) &&
                         value >= 0 && value < 256;
          if (is_byte) {
            pending += static_cast<char>(value);
          } else {
            flush();
            out.push_back(std::move(t));
          }
        }
        flush();
        tokens = std::move(out);
        break;
      }
      case Decoder::kFuse:
        tokens.assign(1, absl::StrJoin(tokens, ""));
        break;
      case Decoder::kStrip:
        for (std::string& t : tokens) {
          std::vector<int32_t> cps;
          size_t i = 0;
          while (i < t.size()) cps.push_back(NextCodePoint(t, &i));
          size_t start_cut = 0, stop_cut = 0;
          while (start_cut < cps.size() && start_cut < static_cast<size_t>(d.start) &&
                 cps[start_cut] == d.replacement_cp) {
            ++start_cut;
          }
          while (stop_cut < cps.size() && stop_cut < static_cast<size_t>(d.stop) &&
                 cps[cps.size() - 1 - stop_cut] == d.replacement_cp) {
            ++stop_cut;
          }
          std::string out;
          for (size_t k = start_cut; k + stop_cut < cps.size(); ++k) AppendCodePoint(cps[k], &out);
          t = std::move(out);
        }
        break;
      case Decoder::kMetaspace:
        for (size_t k = 0; k < tokens.size(); ++k) {
          std::string out;
          size_t i = 0;
          const std::string& t = tokens[k];
          while (i < t.size()) {
            size_t begin = i;
            int32_t cp = NextCodePoint(t, &i);
            if (cp == d.replacement_cp) {
              if (k == 0 && d.prepend != PrependScheme::kNever) continue;
              out += ' ';
            } else {
              out.append(t, begin, i - begin);
            }
          }
          tokens[k] = std::move(out);
        }
        break;
    }
  }
  return absl::StrJoin(tokens, "");
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_to_token.size()); }

const std::string& Tokenizer::token(int32_t id) const {
  static const std::string* empty = new std::string();
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_to_token.size()) return *empty;
  return impl_->id_to_token[id];
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->types.size()) return TokenType::kUnused;
  return impl_->types[id];
}

std::optional<int32_t> Tokenizer::TokenId(absl::string_view token) const {
  auto it = impl_->token_to_id.find(token);
  if (it == impl_->token_to_id.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> Tokenizer::Merges() const {
  std::vector<std::string> out;
  out.reserve(impl_->merge_list.size());
  for (auto [a, b] : impl_->merge_list) {
    out.push_back(absl::StrCat(impl_->id_to_token[a], " ", impl_->id_to_token[b]));
  }
  return out;
}

bool Tokenizer::byte_level() const { return impl_->byte_level; }
const std::string& Tokenizer::split_regex() const { return impl_->split_regex; }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::unk_id() const { return impl_->unk_id; }
bool Tokenizer::normalizes_unicode() const {
  if (impl_->spm != nullptr) {
    return impl_->spm->has_charsmap ||
           (impl_->spm->normalizer_name != "identity" && !impl_->spm->normalizer_name.empty());
  }
  for (const Normalizer& n : impl_->normalizers) {
    if (n.kind == Normalizer::kNfc || n.kind == Normalizer::kNfd || n.kind == Normalizer::kNfkc ||
        n.kind == Normalizer::kNfkd) {
      return true;
    }
  }
  return false;
}
bool Tokenizer::prepends_space() const {
  if (impl_->spm != nullptr) return impl_->spm->add_dummy_prefix;
  for (const Normalizer& n : impl_->normalizers) {
    if (n.kind == Normalizer::kPrepend && n.content == "\xE2\x96\x81") return true;
  }
  for (const PreTokenizer& p : impl_->pre_tokenizers) {
    if (p.kind == PreTokenizer::kMetaspace && p.prepend != PrependScheme::kNever) return true;
  }
  return false;
}
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
bool Tokenizer::adds_bos() const { return impl_->adds_bos; }
bool Tokenizer::adds_eos() const { return impl_->adds_eos; }
const std::string& Tokenizer::fingerprint() const { return impl_->fingerprint; }

const SentencePieceInfo* Tokenizer::sentencepiece() const {
  return impl_->spm_info ? &*impl_->spm_info : nullptr;
}

}  // namespace hilnas::tokenizer
