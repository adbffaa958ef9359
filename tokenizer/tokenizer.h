// A backbone's own tokenizer, read from Hugging Face's `tokenizer.json` as
// published, encoding and decoding exactly as Hugging Face's Rust
// `tokenizers` library does (checked id for id in reference_test.cc).
//
// What it reproduces: a BPE model (byte-level, as GPT-2, Llama 3 and Qwen
// ship, or SentencePiece-style with byte fallback, as Gemma, Llama 2 and
// Mistral ship), the normalizers NFC/NFD/NFKC/NFKD, Replace, Prepend, Strip
// and Sequence, the pre-tokenizers Split (regex or string, every split
// behaviour), ByteLevel, Metaspace, Digits and Sequence, added and special
// tokens with their flags, the TemplateProcessing / ByteLevel post-processors
// and the ByteLevel, Replace, ByteFallback, Fuse, Strip and Metaspace
// decoders. Anything else (a Unigram or WordPiece model, a BERT normalizer, a
// SentencePiece precompiled charsmap) is refused by name at load time: never
// approximated.
//
// A folder that ships only a SentencePiece `tokenizer.model` (no
// tokenizer.json) is read through Google's own SentencePiece library
// (libsentencepiece-dev), so its Unigram or BPE model is run exactly, not
// re-implemented.
//
// Thread-safe: Encode and Decode are const and may run from many threads at
// once (each thread keeps its own bounded word cache).
#ifndef HILNAS_TOKENIZER_TOKENIZER_H_
#define HILNAS_TOKENIZER_TOKENIZER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace hilnas::tokenizer {

struct TokenizerImpl;

// GPT-2's split regex, as the Rust library's ByteLevel pre-tokenizer
// carries it (use_regex: true).
inline constexpr char kGpt2SplitRegex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// How llama.cpp (GGUF `tokenizer.ggml.token_type`) classes a token.
enum class TokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,       // a special added token
  kUserDefined = 4,   // a non-special added token
  kUnused = 5,
  kByte = 6,          // <0xXX> of a byte-fallback vocabulary
};

// What a tokenizer.model says about itself (Tokenizer::sentencepiece()).
struct SentencePieceInfo {
  std::string model_type;  // "unigram", "bpe", "word" or "char"
  bool unigram = false;
  std::string normalizer;  // "identity", "nmt_nfkc", ...; "precompiled" for a bare table
  bool removes_extra_whitespaces = true;
  std::vector<float> scores;  // per id, as the model stores them
};

class Tokenizer {
 public:
  // Reads a `tokenizer.json` file (and, when `config_path` is non-empty, its
  // `tokenizer_config.json`, for bos/eos names and add_bos/add_eos flags).
  // Errors name the file and the JSON field at fault.
  static absl::StatusOr<Tokenizer> FromFile(const std::string& json_path,
                                            const std::string& config_path = "");
  // Reads the tokenizer files of a checkpoint or tokenizer folder:
  // DIR/tokenizer.json, else DIR/tokenizer.model (+ DIR/tokenizer_config.json
  // when present). A `.model` file given to FromFile is read as SentencePiece.
  static absl::StatusOr<Tokenizer> FromDir(const std::string& dir);
  // The file FromDir reads (its bytes are the fingerprint), or "" for none.
  static std::string FileInDir(const std::string& dir);
  // From the bytes of a SentencePiece tokenizer.model. BOS is added and EOS
  // not (Hugging Face's LlamaTokenizer) unless tokenizer_config.json's
  // add_bos_token / add_eos_token say otherwise. Literal "<s>" in text is
  // text, and control tokens decode to nothing, as in SentencePiece.
  static absl::StatusOr<Tokenizer> FromSentencePiece(const std::string& model_bytes,
                                                     absl::string_view name,
                                                     absl::string_view config_text = "");
  // FromFile for a file, FromDir for a folder: what --tokenizer takes.
  static absl::StatusOr<Tokenizer> FromPath(const std::string& path);
  // From the text of a tokenizer.json (`name` is used in error messages).
  static absl::StatusOr<Tokenizer> FromJson(absl::string_view json_text, absl::string_view name,
                                            absl::string_view config_text = "");

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Text to ids. `text` must be valid UTF-8 (an error names the byte offset
  // of the first invalid sequence). With `add_special_tokens`, the
  // post-processor's template (BOS/EOS) is applied, as Rust's
  // `encode(text, add_special_tokens)` does. Literal special-token strings in
  // `text` become their ids, as in the reference.
  absl::StatusOr<std::vector<int32_t>> Encode(absl::string_view text,
                                              bool add_special_tokens = false) const;
  // Ids to text; ids out of range are an error. With `skip_special_tokens`,
  // special added tokens are left out.
  absl::StatusOr<std::string> Decode(const std::vector<int32_t>& ids,
                                     bool skip_special_tokens = false) const;

  // One past the largest id (model vocabulary and added tokens).
  int32_t vocab_size() const;
  // The id's token as the vocabulary spells it ("Ġthe", "▁the", "<0x0A>"),
  // or "" for an id without one (a hole in the id range).
  const std::string& token(int32_t id) const;
  TokenType token_type(int32_t id) const;
  std::optional<int32_t> TokenId(absl::string_view token) const;
  // Merges in rank order, each "left right" as the vocabulary spells them.
  std::vector<std::string> Merges() const;

  // True for a byte-level BPE (GPT-2 style); false for a SentencePiece-style
  // BPE (byte fallback, U+2581 for spaces).
  bool byte_level() const;
  // The split regex of the byte-level pre-tokenizer ("" when there is none):
  // how GGUF export names the pre-tokenizer for llama.cpp.
  const std::string& split_regex() const;
  // True when encoding puts U+2581 before the first word (a Prepend
  // normalizer or a Metaspace pre-tokenizer that prepends): llama.cpp's
  // add_space_prefix.
  bool prepends_space() const;
  std::optional<int32_t> unk_id() const;
  // True when a Unicode normalizer (NFC, NFD, NFKC, NFKD) runs before BPE.
  bool normalizes_unicode() const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  // Whether encode(..., add_special_tokens=true) adds BOS / EOS.
  bool adds_bos() const;
  bool adds_eos() const;
  // SHA-256 (hex) of the tokenizer.json (or tokenizer.model) bytes: what token files and
  // checkpoints record, so that ids made by one tokenizer are never read
  // with another.
  const std::string& fingerprint() const;
  // Non-null for a tokenizer read from a SentencePiece tokenizer.model.
  const SentencePieceInfo* sentencepiece() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

// Where `text` stops being valid UTF-8 (the byte offset of the first bad
// sequence), or nullopt when it is valid. Surrogates and overlong forms are
// invalid, as in Rust's str.
std::optional<size_t> FirstInvalidUtf8(absl::string_view text);

}  // namespace hilnas::tokenizer

#endif  // HILNAS_TOKENIZER_TOKENIZER_H_
