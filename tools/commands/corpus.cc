// `hilnas corpus`: byte-level tokens of English text from Debian packages,
// or, with --tokenizer, any text in a backbone's own vocabulary.
#include "tools/commands/corpus.h"

#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/strings/str_split.h"
#include "quality/tokens.h"
#include "tokenizer/corpus.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "util/files.h"
#include "util/secrets.h"
#include "util/textproto.h"
#include "util/status_macros.h"

namespace hilnas::tools {

namespace {

absl::Status RunTextCorpus(const CorpusOptions& cl) {
  auto tok = tokenizer::Tokenizer::FromPath(cl.tokenizer);
  if (!tok.ok()) return tok.status();
  tokenizer::CorpusSpec spec;
  spec.text_paths = cl.text;
  spec.jsonl_field = cl.field;
  spec.out = cl.out;
  spec.heldout_fraction = cl.heldout;
  spec.max_tokens = cl.max_tokens;
  spec.threads = cl.threads > 0 ? cl.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  spec.progress = [](const tokenizer::CorpusProgress& p) {
    std::fprintf(stderr, "\rcorpus: %.1f / %.1f MB, %s tokens, %s documents, %.1f MB/s   ",
                 p.bytes / 1e6, p.total_bytes / 1e6, WithCommas(p.tokens).c_str(),
                 WithCommas(p.documents).c_str(), p.seconds > 0 ? p.bytes / 1e6 / p.seconds : 0.0);
  };
  HILNAS_ASSIGN_OR_RETURN(tokenizer::CorpusResult r, tokenizer::BuildCorpus(*tok, cl.tokenizer, spec));
  std::fprintf(stderr, "\n");
  std::printf("%s: %s tokens from %s documents (%.1f MB of text, vocabulary %d, tokenizer %s)%s\n",
              cl.out.c_str(), WithCommas(r.tokens).c_str(), WithCommas(r.documents).c_str(),
              r.text_bytes / 1e6, tok->vocab_size(), tok->fingerprint().substr(0, 12).c_str(),
              r.truncated ? ", stopped at --max-tokens" : "");
  if (cl.heldout > 0) {
    std::printf("%s: %s held-out tokens from %s documents\n", tokenizer::HeldoutPath(cl.out).c_str(),
                WithCommas(r.heldout_tokens).c_str(), WithCommas(r.heldout_documents).c_str());
  }
  std::printf("manifest %s\n", r.manifest_path.c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTokenizerMatches(const std::string& ckpt, const std::string& token_file) {
  const std::string recorded = tokenizer::TokenFileFingerprint(token_file);
  if (recorded.empty() || ckpt.empty()) return absl::OkStatus();
  const std::string path = tokenizer::Tokenizer::FileInDir(ckpt);
  std::string text;
  if (path.empty() || !ReadFileToString(path, &text).ok()) return absl::OkStatus();
  const std::string actual = Sha256Hex(text);
  if (actual == recorded) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      token_file, " was made with tokenizer ", recorded.substr(0, 12), " (", token_file,
      ".json), but ", path, " is tokenizer ", actual.substr(0, 12),
      ": its ids would mean other words. Rebuild it with hilnas corpus --tokenizer ", ckpt));
}

absl::Status RunCorpus(const CorpusOptions& cl) {
  const std::string out = cl.out;
  if (out.empty()) return absl::InvalidArgumentError("corpus needs --out FILE");
  if (!cl.tokenizer.empty()) return RunTextCorpus(cl);
  if (!cl.text.empty()) return absl::InvalidArgumentError("--text needs --tokenizer DIR");
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
      "corpus", "--out FILE [--sources A,B] | --tokenizer DIR --text PATH... --out FILE",
      "token files: byte-level from Debian's English text, or any text with a backbone's tokenizer",
      [](const CorpusOptions& o) { return ExitCode(RunCorpus(o)); });
  app->add_option("--out", o->out,
                  "the token file to write (uint16 ids; uint32 when the name ends in .u32)")
      ->required();
  app->add_option("--sources", o->sources,
                  "comma-separated text files or folders; default the Debian fortunes and common "
                  "licences");
  app->add_option("--tokenizer", o->tokenizer,
                  "a folder with tokenizer.json or tokenizer.model (a checkpoint's), or the file: encode --text with it");
  app->add_option("--text", o->text,
                  "text files or folders (.txt, .md, .jsonl, and .gz of them); repeatable");
  app->add_option("--field", o->field, "the JSON field of a .jsonl line that holds the text")
      ->capture_default_str();
  app->add_option("--heldout", o->heldout,
                  "share of documents written to the held-out file (OUT.heldout[.u32])")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  app->add_option("--max-tokens", o->max_tokens, "stop after this many training tokens (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app->add_option("--threads", o->threads, "encoding threads (0: every core)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
}

}  // namespace hilnas::tools
