// `hilnas corpus`, also a step of `hilnas backbone` and `hilnas demo`.
#ifndef HILNAS_TOOLS_COMMANDS_CORPUS_H_
#define HILNAS_TOOLS_COMMANDS_CORPUS_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"

namespace hilnas::tools {

struct CorpusOptions {
  std::string out;
  std::string sources;  // comma-separated files or folders; default Debian's English text
  // With a tokenizer (folder with tokenizer.json, or the file): text in the
  // backbone's own vocabulary (tokenizer/corpus.h) instead of bytes.
  std::string tokenizer;
  std::vector<std::string> text;
  std::string field = "text";
  double heldout = 0;
  int64_t max_tokens = 0;
  int32_t threads = 0;
};

inline CorpusOptions ByteCorpusOptions(std::string out, std::string sources) {
  CorpusOptions o;
  o.out = std::move(out);
  o.sources = std::move(sources);
  return o;
}

// FAILED_PRECONDITION when `token_file`'s manifest names a tokenizer other
// than the checkpoint folder's tokenizer.json (its ids would mean other
// words); OK when either side has none (a byte corpus, a checkpoint trained
// from scratch). calibrate, train and eval call it before reading tokens.
absl::Status CheckTokenizerMatches(const std::string& ckpt, const std::string& token_file);

// Writes the byte-level token file and its manifest (OUT.json).
absl::Status RunCorpus(const CorpusOptions& o);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMANDS_CORPUS_H_
