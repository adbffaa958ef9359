// Token files from plain text with a backbone's own tokenizer (`hilnas corpus
// --tokenizer`): files and folders of `.txt`/`.md` (a file is a document),
// `.jsonl` (a line's field is a document), either gzip-compressed (`.gz`),
// streamed in bounded batches, encoded on every core, written in order.
// Each document is framed as the tokenizer's template says (BOS when it adds
// one) and ends with EOS when the tokenizer has one, so documents never run
// into each other. A held-out share of documents (chosen by a hash of their
// text: the same on every machine, whatever the file order) goes to a second
// file. A JSON manifest beside each token file names the sources (bytes,
// SHA-256), the counts and the tokenizer's fingerprint, which calibrate,
// train and eval compare with the checkpoint's.
#ifndef HILNAS_TOKENIZER_CORPUS_H_
#define HILNAS_TOKENIZER_CORPUS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizer/tokenizer.h"

namespace hilnas::tokenizer {

struct CorpusProgress {
  int64_t bytes = 0, total_bytes = 0;  // text read so far, of all sources (on disk)
  int64_t tokens = 0, documents = 0;
  double seconds = 0;
};

struct CorpusSpec {
  std::vector<std::string> text_paths;  // files or folders
  std::string jsonl_field = "text";
  // The token file: uint32 ids when the name ends in ".u32", uint16
  // otherwise (refused when the vocabulary does not fit).
  std::string out;
  double heldout_fraction = 0;  // share of documents written to HeldoutPath(out)
  int64_t max_tokens = 0;       // stop after this many (0: all)
  int threads = 1;
  std::function<void(const CorpusProgress&)> progress;  // after each batch
};

struct CorpusResult {
  int64_t tokens = 0, heldout_tokens = 0, documents = 0, heldout_documents = 0;
  int64_t text_bytes = 0;
  bool truncated = false;  // stopped at max_tokens
  std::string manifest_path;
};

// "x.u32" -> "x.heldout.u32"; "x" -> "x.heldout".
std::string HeldoutPath(const std::string& out);

absl::StatusOr<CorpusResult> BuildCorpus(const Tokenizer& tokenizer, const std::string& tokenizer_source,
                                         const CorpusSpec& spec);

// The tokenizer fingerprint a token file's manifest (FILE.json) records, or
// "" when there is no manifest or it names none (a byte corpus, an .npy).
std::string TokenFileFingerprint(const std::string& token_file);

}  // namespace hilnas::tokenizer

#endif  // HILNAS_TOKENIZER_CORPUS_H_
