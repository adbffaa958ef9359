// `hilnas corpus`: byte-level tokens of English text from Debian packages.
#include "tools/commands/corpus.h"

#include <cstdio>

#include "absl/strings/str_split.h"
#include "quality/tokens.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "util/files.h"
#include "util/textproto.h"
#include "util/status_macros.h"

namespace hilnas::tools {

absl::Status RunCorpus(const CorpusOptions& cl) {
  const std::string out = cl.out;
  if (out.empty()) return absl::InvalidArgumentError("corpus needs --out FILE");
  std::vector<std::string> sources = DefaultCorpusSources();
  if (const std::string s = cl.sources; !s.empty()) {
    sources = absl::StrSplit(s, ',', absl::SkipEmpty());
  }
  CorpusManifest manifest;
  HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, BuildByteCorpus(sources, &manifest));
  HILNAS_RETURN_IF_ERROR(WriteTokenFile(out, ids));
  HILNAS_RETURN_IF_ERROR(WriteFileAtomically(out + ".json", manifest.ToJson()));
  std::printf("%s: %s byte tokens from %zu files (manifest %s.json, fnv1a %llx)\n", out.c_str(),
              WithCommas(manifest.tokens).c_str(), manifest.files.size(), out.c_str(),
              static_cast<unsigned long long>(manifest.fnv1a));
  return absl::OkStatus();
}

void AddCorpusCommand(Cli& cli) {
  auto [app, o] = cli.Add<CorpusOptions>(
      "corpus", "--out FILE [--sources A,B]",
      "byte-level tokens of English text from Debian packages",
      [](const CorpusOptions& o) { return ExitCode(RunCorpus(o)); });
  app->add_option("--out", o->out, "the token file to write (uint16 ids)")->required();
  app->add_option("--sources", o->sources,
                  "comma-separated text files or folders; default the Debian fortunes and common "
                  "licences");
}

}  // namespace hilnas::tools
