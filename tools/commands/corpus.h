// `hilnas corpus`, also a step of `hilnas backbone` and `hilnas demo`.
#ifndef HILNAS_TOOLS_COMMANDS_CORPUS_H_
#define HILNAS_TOOLS_COMMANDS_CORPUS_H_

#include <string>

#include "absl/status/status.h"

namespace hilnas::tools {

struct CorpusOptions {
  std::string out;
  std::string sources;  // comma-separated files or folders; default Debian's English text
};

// Writes the byte-level token file and its manifest (OUT.json).
absl::Status RunCorpus(const CorpusOptions& o);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMANDS_CORPUS_H_
