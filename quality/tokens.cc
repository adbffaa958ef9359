#include "quality/tokens.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"
#include "util/fnv.h"
#include "util/textproto.h"

namespace hilnas {

namespace fs = std::filesystem;

namespace {

// Bytes per id: uint32 for "*.u32", uint16 otherwise.
size_t IdWidth(const std::string& path) { return absl::EndsWith(path, ".u32") ? 4 : 2; }

}  // namespace

namespace {

// The value of `key` in a .npy header's dict literal, as written ("'<u4'",
// "(3, 4)", "False"); empty when absent.
std::string NpyHeaderValue(const std::string& header, const std::string& key) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t v = header.find(':', k);
  if (v == std::string::npos) return "";
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  const char open = header[v];
  const char close = open == '\'' ? '\'' : open == '(' ? ')' : ',';
  const size_t e = header.find(close, v + 1);
  if (e == std::string::npos) return "";
  return header.substr(v, e - v + (close == ',' ? 0 : 1));
}

// `count` little-endian integers of `width` bytes at `data` as token ids,
// each checked against the vocabulary (any id below 2^31 when it is 0).
absl::StatusOr<std::vector<int32_t>> DecodeNpyIds(const std::string& path,
                                                  const unsigned char* data, size_t count,
                                                  size_t width, bool is_signed,
                                                  int64_t vocab_size) {
  std::vector<int32_t> ids(count);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint64_t v = 0;
    for (size_t b = 0; b < width; ++b) {
      v |= static_cast<uint64_t>(data[i * width + b]) << (8 * b);
    }
    const bool negative = is_signed && (v >> (8 * width - 1)) & 1;
    const uint64_t limit = vocab_size > 0 ? static_cast<uint64_t>(vocab_size) : (uint64_t{1} << 31);
    if (negative || v >= limit) {
      const int64_t shown = negative ? static_cast<int64_t>(v | (~uint64_t{0} << (8 * width - 1)))
                                     : static_cast<int64_t>(v);
      return absl::InvalidArgumentError(
          absl::StrCat("token file ", path, ": id ", shown, " at position ", i,
                       vocab_size > 0 ? absl::StrCat(" is outside vocabulary ", vocab_size)
                                      : std::string(" is not a token id")));
    }
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

// A NumPy .npy array (format 1.0-3.0: magic, version, header length, a
// Python dict literal, then the data) of uint16, uint32, int32 or int64
// ids, any shape in C order, flattened.
absl::StatusOr<std::vector<int32_t>> ReadNpyTokens(const std::string& path,
                                                   const std::string& bytes, int64_t vocab_size) {
  auto bad = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("token file ", path, ": ", why));
  };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return bad("not a .npy file");
  const auto* u = reinterpret_cast<const unsigned char*>(bytes.data());
  const int major = u[6];
  size_t header_len = 0, header_start = 0;
  if (major == 1) {
    header_len = u[8] | (u[9] << 8);
    header_start = 10;
  } else if ((major == 2 || major == 3) && bytes.size() >= 12) {
    header_len = u[8] | (u[9] << 8) | (u[10] << 16) | (static_cast<size_t>(u[11]) << 24);
    header_start = 12;
  } else {
    return bad(absl::StrCat(".npy format version ", major, " is not 1, 2 or 3"));
  }
  if (header_start + header_len > bytes.size()) return bad(".npy header runs past the file");
  const std::string header = bytes.substr(header_start, header_len);
  const std::string descr = NpyHeaderValue(header, "descr");
  struct Kind {
    const char* descr;
    size_t width;
    bool is_signed;
  };
  static constexpr Kind kKinds[] = {
      {"'<u2'", 2, false}, {"'<u4'", 4, false}, {"'<i4'", 4, true}, {"'<i8'", 8, true}};
  const Kind* kind = nullptr;
  for (const Kind& k : kKinds) {
    if (descr == k.descr) kind = &k;
  }
  if (kind == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token file ", path, ": .npy dtype ", descr.empty() ? "(none)" : descr,
        " is not uint16, uint32, int32 or int64 little-endian ('<u2', '<u4', '<i4', '<i8')"));
  }
  if (NpyHeaderValue(header, "fortran_order").rfind("True", 0) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file ", path, ": .npy array is in Fortran order; save it C-ordered"));
  }
  // The shape's product must be what the data holds.
  const std::string shape = NpyHeaderValue(header, "shape");
  int64_t count = 1;
  for (absl::string_view d : absl::StrSplit(absl::StripPrefix(absl::StripSuffix(shape, ")"), "("),
                                            ',', absl::SkipWhitespace())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(d), &n) || n < 0 || n > (int64_t{1} << 40)) {
      return bad(absl::StrCat(".npy shape ", shape, " is not a tuple of sizes"));
    }
    count *= n;
  }
  const size_t data_start = header_start + header_len;
  if (shape.empty() || static_cast<size_t>(count) * kind->width != bytes.size() - data_start) {
    return bad(absl::StrCat(".npy shape ", shape, " of ", descr, " needs ", count * kind->width,
                            " bytes of data, the file has ", bytes.size() - data_start,
                            " (truncated?)"));
  }
  return DecodeNpyIds(path, u + data_start, static_cast<size_t>(count), kind->width,
                      kind->is_signed, vocab_size);
}

}  // namespace

absl::StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path, int64_t vocab_size) {
  std::string bytes;
  absl::Status read = ReadFileToString(path, &bytes);
  if (!read.ok()) return read;
  if (absl::EndsWith(path, ".npy")) return ReadNpyTokens(path, bytes, vocab_size);
  const size_t width = IdWidth(path);
  if (bytes.size() % width != 0) {
    return absl::DataLossError(absl::StrCat("token file ", path, ": ", bytes.size(),
                                            " bytes is not a whole number of ", width,
                                            "-byte ids (truncated?)"));
  }
  std::vector<int32_t> ids(bytes.size() / width);
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t v = 0;
    for (size_t b = 0; b < width; ++b) v |= static_cast<uint32_t>(p[i * width + b]) << (8 * b);
    if (vocab_size > 0 && v >= static_cast<uint64_t>(vocab_size)) {
      return absl::InvalidArgumentError(absl::StrCat("token file ", path, ": id ", v,
                                                     " at position ", i, " is outside vocabulary ",
                                                     vocab_size));
    }
    ids[i] = static_cast<int32_t>(v);
  }
  return ids;
}

absl::Status WriteTokenFile(const std::string& path, const std::vector<int32_t>& ids) {
  const size_t width = IdWidth(path);
  std::string bytes(ids.size() * width, '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    const uint32_t v = static_cast<uint32_t>(ids[i]);
    if (width == 2 && v > 0xffff) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": id ", v, " does not fit uint16; name the file *.u32"));
    }
    for (size_t b = 0; b < width; ++b) bytes[i * width + b] = static_cast<char>(v >> (8 * b));
  }
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<TokenSplit> SplitTokens(std::vector<int32_t> ids, double heldout_fraction,
                                       int64_t min_tokens) {
  if (!(heldout_fraction > 0 && heldout_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("held-out fraction ", heldout_fraction, " is not in (0, 1)"));
  }
  const int64_t n = static_cast<int64_t>(ids.size());
  const int64_t held = static_cast<int64_t>(n * heldout_fraction);
  if (held < min_tokens || n - held < min_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(n, " tokens split ", n - held, " / ", held,
                                                   " leaves a part under ", min_tokens,
                                                   " tokens (one batch)"));
  }
  TokenSplit s;
  s.heldout.assign(ids.end() - held, ids.end());
  ids.resize(n - held);
  s.train = std::move(ids);
  return s;
}

std::vector<std::string> DefaultCorpusSources() {
  return {"/usr/share/games/fortunes", "/usr/share/common-licenses"};
}

std::string CorpusManifest::ToJson() const {
  nlohmann::json j;
  j["tokenizer"] = "bytes (one token per byte, vocabulary 256)";
  j["tokens"] = tokens;
  j["fnv1a"] = absl::StrCat(fnv1a);
  for (const auto& [path, bytes] : files) j["files"].push_back({{"path", path}, {"bytes", bytes}});
  return j.dump(2) + "\n";
}

absl::StatusOr<std::vector<int32_t>> BuildByteCorpus(const std::vector<std::string>& sources,
                                                     CorpusManifest* manifest) {
  std::vector<std::string> files;
  for (const std::string& src : sources) {
    std::error_code ec;
    if (!fs::exists(src, ec)) {
      return absl::NotFoundError(
          absl::StrCat("corpus source ", src, " does not exist",
                       absl::StrContains(src, "fortunes") ? " (apt-get install fortunes)" : ""));
    }
    if (fs::is_regular_file(src)) {
      files.push_back(src);
      continue;
    }
    for (const auto& e : fs::recursive_directory_iterator(src)) {
      if (e.is_symlink() || !e.is_regular_file()) continue;
      const std::string p = e.path().string();
      if (absl::EndsWith(p, ".dat")) continue;  // fortune's binary index
      files.push_back(p);
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) return absl::NotFoundError("corpus: no text files under the sources");
  std::vector<int32_t> ids;
  CorpusManifest m;
  m.fnv1a = kFnv1aSeed;
  for (const std::string& f : files) {
    std::string text;
    absl::Status s = ReadFileToString(f, &text);
    if (!s.ok()) return s;
    m.files.push_back({f, static_cast<int64_t>(text.size())});
    text += "\n\n";
    m.fnv1a = Fnv1a(text.data(), text.size(), m.fnv1a);
    ids.insert(ids.end(), reinterpret_cast<const unsigned char*>(text.data()),
               reinterpret_cast<const unsigned char*>(text.data()) + text.size());
  }
  m.tokens = static_cast<int64_t>(ids.size());
  if (manifest != nullptr) *manifest = std::move(m);
  return ids;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> EvenlySpacedPrompts(
    const std::vector<int32_t>& ids, int count, int64_t length) {
  const int64_t n = static_cast<int64_t>(ids.size());
  if (count < 1 || length < 1 || n < length) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot take ", count, " prompts of ", length, " tokens from ", n, " tokens"));
  }
  std::vector<std::vector<int64_t>> out;
  const int64_t span = n - length;
  for (int i = 0; i < count; ++i) {
    const int64_t start = count == 1 ? 0 : span * i / (count - 1);
    out.emplace_back(ids.begin() + start, ids.begin() + start + length);
  }
  return out;
}

}  // namespace hilnas
