#include "tokenizer/corpus.h"

#include <openssl/evp.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "util/fnv.h"
#include "util/textproto.h"

namespace hilnas::tokenizer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kChunkBytes = 1 << 20;   // a long document is encoded in ~1 MB pieces
constexpr size_t kBatchBytes = 8 << 20;   // text held at once (bounded memory)
constexpr size_t kHardChunkBytes = 16 << 20;

bool IsGz(const std::string& p) { return absl::EndsWith(p, ".gz"); }
std::string Inner(const std::string& p) { return IsGz(p) ? p.substr(0, p.size() - 3) : p; }
bool IsJsonl(const std::string& p) { return absl::EndsWith(Inner(p), ".jsonl"); }
bool IsText(const std::string& p) {
  std::string inner = Inner(p);
  return absl::EndsWith(inner, ".txt") || absl::EndsWith(inner, ".md") || IsJsonl(p);
}

// A file read as a byte stream, gunzipped when its name ends in ".gz".
class Source {
 public:
  static absl::StatusOr<std::unique_ptr<Source>> Open(const std::string& path) {
    auto s = std::unique_ptr<Source>(new Source());
    s->path_ = path;
    if (IsGz(path)) {
      s->gz_ = gzopen(path.c_str(), "rb");
      if (s->gz_ == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
      gzbuffer(s->gz_, 1 << 17);
    } else {
      s->file_ = std::fopen(path.c_str(), "rb");
      if (s->file_ == nullptr) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
    }
    s->sha_ = EVP_MD_CTX_new();
    EVP_DigestInit_ex(s->sha_, EVP_sha256(), nullptr);
    return s;
  }
  ~Source() {
    if (gz_ != nullptr) gzclose(gz_);
    if (file_ != nullptr) std::fclose(file_);
    EVP_MD_CTX_free(sha_);
  }
  // Appends up to `n` bytes to *out; 0 at the end.
  absl::StatusOr<size_t> Read(size_t n, std::string* out) {
    size_t old = out->size();
    out->resize(old + n);
    int64_t got;
    if (gz_ != nullptr) {
      got = gzread(gz_, out->data() + old, static_cast<unsigned>(n));
      if (got < 0) {
        int err = 0;
        const char* msg = gzerror(gz_, &err);
        return absl::DataLossError(absl::StrCat(path_, ": gzip stream is corrupt: ", msg));
      }
    } else {
      got = static_cast<int64_t>(std::fread(out->data() + old, 1, n, file_));
      if (got == 0 && std::ferror(file_)) return absl::DataLossError(absl::StrCat(path_, ": read failed"));
    }
    out->resize(old + got);
    EVP_DigestUpdate(sha_, out->data() + old, got);
    bytes_ += got;
    return static_cast<size_t>(got);
  }
  // Disk position (compressed bytes for .gz), for progress.
  int64_t disk_offset() const {
    if (gz_ != nullptr) return gzoffset(gz_);
    return std::ftell(file_);
  }
  std::string Sha256() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(sha_, digest, &len);
    std::string hex;
    for (unsigned i = 0; i < len; ++i) absl::StrAppend(&hex, absl::Hex(digest[i], absl::kZeroPad2));
    return hex;
  }
  int64_t bytes() const { return bytes_; }

 private:
  Source() = default;
  std::string path_;
  gzFile gz_ = nullptr;
  FILE* file_ = nullptr;
  EVP_MD_CTX* sha_ = nullptr;
  int64_t bytes_ = 0;
};

// A piece of text to encode and how it sits in its document.
struct Unit {
  std::string text;
  bool doc_start = false, doc_end = false, heldout = false;
  std::vector<int32_t> ids;
  absl::Status status;
};

// Where a long document may be cut without changing its tokens: after a
// newline that a letter or digit follows (no pre-tokenizer joins across it).
size_t SafeCut(const std::string& text, size_t want) {
  for (size_t k = want; k + 1 < text.size(); ++k) {
    unsigned char next = static_cast<unsigned char>(text[k + 1]);
    if (text[k] == '\n' && ((next >= 'a' && next <= 'z') || (next >= 'A' && next <= 'Z') ||
                            (next >= '0' && next <= '9'))) {
      return k + 1;
    }
  }
  return std::string::npos;
}

bool HeldOut(absl::string_view first_chunk, double fraction) {
  if (fraction <= 0) return false;
  absl::string_view head = first_chunk.substr(0, 4096);
  uint64_t h = Fnv1a(head.data(), head.size());
  // FNV's top bits barely move with the last bytes: mix (splitmix64's finaliser).
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
  h ^= h >> 31;
  return static_cast<double>(h >> 11) / static_cast<double>(1ull << 53) < fraction;
}

class TokenWriter {
 public:
  absl::Status Open(const std::string& path, bool wide) {
    path_ = path;
    tmp_ = path + ".tmp";
    wide_ = wide;
    out_.open(tmp_, std::ios::binary | std::ios::trunc);
    if (!out_) return absl::PermissionDeniedError(absl::StrCat(tmp_, ": cannot write"));
    return absl::OkStatus();
  }
  void Write(const std::vector<int32_t>& ids, size_t count) {
    buffer_.clear();
    for (size_t k = 0; k < count; ++k) {
      uint32_t v = static_cast<uint32_t>(ids[k]);
      buffer_.push_back(static_cast<char>(v & 0xFF));
      buffer_.push_back(static_cast<char>((v >> 8) & 0xFF));
      if (wide_) {
        buffer_.push_back(static_cast<char>((v >> 16) & 0xFF));
        buffer_.push_back(static_cast<char>((v >> 24) & 0xFF));
      }
    }
    out_.write(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    hash_ = Fnv1a(buffer_.data(), buffer_.size(), hash_);
    tokens_ += static_cast<int64_t>(count);
  }
  absl::Status Close() {
    out_.close();
    if (!out_) return absl::DataLossError(absl::StrCat(tmp_, ": write failed (disk full?)"));
    std::error_code ec;
    fs::rename(tmp_, path_, ec);
    if (ec) return absl::InternalError(absl::StrCat("rename ", tmp_, ": ", ec.message()));
    return absl::OkStatus();
  }
  int64_t tokens() const { return tokens_; }
  uint64_t hash() const { return hash_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_, buffer_;
  bool wide_ = false;
  std::ofstream out_;
  int64_t tokens_ = 0;
  uint64_t hash_ = kFnv1aSeed;
};

}  // namespace

std::string HeldoutPath(const std::string& out) {
  if (absl::EndsWith(out, ".u32")) return out.substr(0, out.size() - 4) + ".heldout.u32";
  return out + ".heldout";
}

std::string TokenFileFingerprint(const std::string& token_file) {
  std::ifstream in(token_file + ".json");
  if (!in) return "";
  try {
    json j = json::parse(in);
    if (j.contains("tokenizer") && j["tokenizer"].contains("fingerprint") &&
        j["tokenizer"]["fingerprint"].is_string()) {
      return j["tokenizer"]["fingerprint"].get<std::string>();
    }
  } catch (const json::exception&) {
  }
  return "";
}

absl::StatusOr<CorpusResult> BuildCorpus(const Tokenizer& tokenizer,
                                         const std::string& tokenizer_source,
                                         const CorpusSpec& spec) {
  if (spec.text_paths.empty()) return absl::InvalidArgumentError("corpus: no --text given");
  if (spec.out.empty()) return absl::InvalidArgumentError("corpus: no --out given");
  if (spec.heldout_fraction < 0 || spec.heldout_fraction >= 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--heldout ", spec.heldout_fraction, " must be in [0, 1)"));
  }
  bool wide = absl::EndsWith(spec.out, ".u32");
  if (!wide && tokenizer.vocab_size() > 65536) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--out ", spec.out, ": the vocabulary has ", tokenizer.vocab_size(),
        " ids, more than uint16 holds; name the file *.u32 for uint32 ids"));
  }
  // Sources: files as named, folders walked in sorted order for .txt, .md,
  // .jsonl (and their .gz).
  std::vector<std::string> files;
  for (const std::string& p : spec.text_paths) {
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<std::string> found;
      for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec)) {
        if (it->is_regular_file() && IsText(it->path().string())) found.push_back(it->path().string());
      }
      if (ec) return absl::NotFoundError(absl::StrCat("--text ", p, ": ", ec.message()));
      std::sort(found.begin(), found.end());
      if (found.empty()) {
        return absl::NotFoundError(absl::StrCat("--text ", p, ": no .txt, .md or .jsonl files (or .gz) under it"));
      }
      files.insert(files.end(), found.begin(), found.end());
    } else if (fs::is_regular_file(p, ec)) {
      files.push_back(p);
    } else {
      return absl::NotFoundError(absl::StrCat("--text ", p, ": no such file or folder"));
    }
  }
  int64_t total_bytes = 0;
  for (const auto& f : files) total_bytes += static_cast<int64_t>(fs::file_size(f));

  std::optional<int32_t> bos = tokenizer.adds_bos() ? tokenizer.bos_id() : std::nullopt;
  std::optional<int32_t> eos = tokenizer.eos_id();
  TokenWriter train, heldout;
  if (auto s = train.Open(spec.out, wide); !s.ok()) return s;
  if (spec.heldout_fraction > 0) {
    if (auto s = heldout.Open(HeldoutPath(spec.out), wide); !s.ok()) return s;
  }
  CorpusResult result;
  auto start_time = std::chrono::steady_clock::now();
  int threads = std::max(1, spec.threads);
  json sources = json::array();
  std::vector<Unit> batch;
  size_t batch_bytes = 0;
  int64_t disk_done = 0;
  bool stop = false;

  // Encodes the batch on every thread, then writes it in order.
  auto flush = [&]() -> absl::Status {
    std::vector<std::thread> pool;
    for (int w = 0; w < threads; ++w) {
      pool.emplace_back([&, w] {
        for (size_t i = w; i < batch.size(); i += threads) {
          Unit& u = batch[i];
          auto ids = tokenizer.Encode(u.text);
          if (!ids.ok()) {
            u.status = ids.status();
            continue;
          }
          if (u.doc_start && bos) u.ids.push_back(*bos);
          u.ids.insert(u.ids.end(), ids->begin(), ids->end());
          if (u.doc_end && eos) u.ids.push_back(*eos);
        }
      });
    }
    for (auto& t : pool) t.join();
    for (Unit& u : batch) {
      if (!u.status.ok()) return u.status;
      if (stop) break;
      TokenWriter& w = u.heldout ? heldout : train;
      size_t count = u.ids.size();
      if (!u.heldout && spec.max_tokens > 0 && train.tokens() + static_cast<int64_t>(count) >= spec.max_tokens) {
        count = static_cast<size_t>(spec.max_tokens - train.tokens());
        stop = true;
        result.truncated = true;
      }
      w.Write(u.ids, count);
      if (u.doc_start) ++(u.heldout ? result.heldout_documents : result.documents);
    }
    batch.clear();
    batch_bytes = 0;
    if (spec.progress) {
      CorpusProgress p;
      p.bytes = disk_done;
      p.total_bytes = total_bytes;
      p.tokens = train.tokens() + heldout.tokens();
      p.documents = result.documents + result.heldout_documents;
      p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_time).count();
      spec.progress(p);
    }
    return absl::OkStatus();
  };
  auto add = [&](Unit u) -> absl::Status {
    batch_bytes += u.text.size();
    batch.push_back(std::move(u));
    if (batch_bytes >= kBatchBytes) return flush();
    return absl::OkStatus();
  };

  for (const std::string& path : files) {
    if (stop) break;
    auto source = Source::Open(path);
    if (!source.ok()) return source.status();
    Source& src = **source;
    std::string pending;
    bool eof = false;
    int64_t disk_before = disk_done;
    auto fill = [&](size_t want) -> absl::Status {
      while (!eof && pending.size() < want) {
        auto got = src.Read(std::max<size_t>(want - pending.size(), 1 << 16), &pending);
        if (!got.ok()) return got.status();
        if (*got == 0) eof = true;
      }
      disk_done = disk_before + src.disk_offset();
      return absl::OkStatus();
    };
    auto check_utf8 = [&](const std::string& text, int64_t line) -> absl::Status {
      if (auto bad = FirstInvalidUtf8(text)) {
        return absl::InvalidArgumentError(
            line > 0 ? absl::StrCat(path, ":", line, ": not valid UTF-8 (byte ", *bad, " of the line)")
                     : absl::StrCat(path, ": not valid UTF-8 near byte ", src.bytes() - pending.size() - text.size() + *bad));
      }
      return absl::OkStatus();
    };
    if (IsJsonl(path)) {
      int64_t line_no = 0;
      while (!stop) {
        size_t nl;
        while ((nl = pending.find('\n')) == std::string::npos && !eof) {
          if (auto s = fill(pending.size() + (1 << 16)); !s.ok()) return s;
        }
        if (pending.empty() && eof) break;
        nl = nl == std::string::npos ? pending.size() : nl;
        std::string line = pending.substr(0, nl);
        pending.erase(0, std::min(pending.size(), nl + 1));
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        json j;
        try {
          j = json::parse(line);
        } catch (const json::exception& e) {
          return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": not JSON: ", e.what()));
        }
        if (!j.is_object() || !j.contains(spec.jsonl_field) || !j[spec.jsonl_field].is_string()) {
          return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": no string field \"",
                                                         spec.jsonl_field, "\" (--field)"));
        }
        Unit u;
        u.text = j[spec.jsonl_field].get<std::string>();
        u.doc_start = u.doc_end = true;
        u.heldout = HeldOut(u.text, spec.heldout_fraction);
        if (auto s = add(std::move(u)); !s.ok()) return s;
      }
    } else {
      // One document per file, in pieces cut where tokens cannot change.
      bool first = true, heldout_doc = false;
      while (!stop) {
        if (auto s = fill(kChunkBytes * 2); !s.ok()) return s;
        if (pending.empty() && !first) break;
        size_t cut = eof ? std::string::npos : SafeCut(pending, kChunkBytes);
        while (cut == std::string::npos && !eof && pending.size() < kHardChunkBytes) {
          if (auto s = fill(pending.size() * 2); !s.ok()) return s;
          cut = eof ? std::string::npos : SafeCut(pending, kChunkBytes);
        }
        if (cut == std::string::npos && !eof) cut = pending.rfind('\n') + 1;  // a 16 MB line-less run
        Unit u;
        if (cut == std::string::npos || cut == 0 || cut >= pending.size()) {
          u.text = std::move(pending);
          pending.clear();
        } else {
          u.text = pending.substr(0, cut);
          pending.erase(0, cut);
        }
        if (auto s = check_utf8(u.text, 0); !s.ok()) return s;
        u.doc_start = first;
        u.doc_end = eof && pending.empty();
        if (first) heldout_doc = HeldOut(u.text, spec.heldout_fraction);
        u.heldout = heldout_doc;
        first = false;
        bool last = u.doc_end;
        if (auto s = add(std::move(u)); !s.ok()) return s;
        if (last) break;
      }
    }
    sources.push_back({{"path", fs::absolute(path).string()},
                       {"bytes", src.bytes()},
                       {"sha256", src.Sha256()}});
    result.text_bytes += src.bytes();
    disk_done = disk_before + static_cast<int64_t>(fs::file_size(path));
  }
  if (!batch.empty()) {
    if (auto s = flush(); !s.ok()) return s;
  }
  if (auto s = train.Close(); !s.ok()) return s;
  if (spec.heldout_fraction > 0) {
    if (auto s = heldout.Close(); !s.ok()) return s;
  }
  result.tokens = train.tokens();
  result.heldout_tokens = heldout.tokens();
  auto manifest = [&](const TokenWriter& w, int64_t docs, const char* split) {
    json j;
    j["split"] = split;
    j["token_file"] = fs::absolute(w.path()).string();
    j["dtype"] = wide ? "uint32" : "uint16";
    j["tokens"] = w.tokens();
    j["documents"] = docs;
    j["fnv1a"] = absl::StrCat(absl::Hex(w.hash()));
    j["tokenizer"] = {{"source", tokenizer_source},
                      {"fingerprint", tokenizer.fingerprint()},
                      {"vocab_size", tokenizer.vocab_size()}};
    j["framing"] = {{"bos", bos ? json(*bos) : json()}, {"eos", eos ? json(*eos) : json()}};
    j["heldout_fraction"] = spec.heldout_fraction;
    j["max_tokens"] = spec.max_tokens;
    j["truncated"] = result.truncated;
    j["sources"] = sources;
    return j.dump(2) + "\n";
  };
  if (auto s = WriteFileAtomically(spec.out + ".json", manifest(train, result.documents, "train")); !s.ok()) return s;
  if (spec.heldout_fraction > 0) {
    if (auto s = WriteFileAtomically(HeldoutPath(spec.out) + ".json",
                           manifest(heldout, result.heldout_documents, "heldout"));
        !s.ok()) {
      return s;
    }
  }
  result.manifest_path = spec.out + ".json";
  return result;
}

}  // namespace hilnas::tokenizer
