// `hilnas tokenize`: text to ids and ids to text with a backbone's own
// tokenizer (tokenizer/tokenizer.h), for checking what a model will see.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {

struct TokenizeOptions {
  std::string tokenizer;
  std::string text, file, ids;
  bool special = false;       // add the template's BOS/EOS
  bool skip_special = false;  // decoding: leave special tokens out
  bool show_tokens = false;
  bool json = false;
};

absl::Status RunTokenize(const TokenizeOptions& o) {
  auto tok = tokenizer::Tokenizer::FromPath(o.tokenizer);
  if (!tok.ok()) return tok.status();
  if (!o.ids.empty()) {
    std::vector<int32_t> ids;
    for (absl::string_view part : absl::StrSplit(o.ids, absl::ByAnyChar(", "), absl::SkipEmpty())) {
      int32_t id = 0;
      if (!absl::SimpleAtoi(part, &id)) {
        return absl::InvalidArgumentError(absl::StrCat("--ids: \"", part, "\" is not an integer"));
      }
      ids.push_back(id);
    }
    HILNAS_ASSIGN_OR_RETURN(std::string text, tok->Decode(ids, o.skip_special));
    if (o.json) {
      std::printf("%s\n", nlohmann::json({{"text", text}, {"ids", ids}}).dump().c_str());
    } else {
      std::printf("%s\n", text.c_str());
    }
    return absl::OkStatus();
  }
  std::string text = o.text;
  if (!o.file.empty()) {
    HILNAS_RETURN_IF_ERROR(ReadFileToString(o.file, &text));
  }
  auto ids = tok->Encode(text, o.special);
  if (!ids.ok()) {
    return absl::Status(ids.status().code(),
                        absl::StrCat(o.file.empty() ? "--text" : o.file, ": ", ids.status().message()));
  }
  if (o.json) {
    nlohmann::json j = {{"ids", *ids}};
    if (o.show_tokens) {
      std::vector<std::string> tokens;
      for (int32_t id : *ids) tokens.push_back(tok->token(id));
      j["tokens"] = tokens;
    }
    std::printf("%s\n", j.dump().c_str());
    return absl::OkStatus();
  }
  std::string line;
  for (int32_t id : *ids) {
    if (!line.empty()) line += ' ';
    absl::StrAppend(&line, id);
    if (o.show_tokens) absl::StrAppend(&line, "(", tok->token(id), ")");
  }
  std::printf("%s\n", line.c_str());
  std::fprintf(stderr, "%zu tokens, %zu bytes\n", ids->size(), text.size());
  return absl::OkStatus();
}

}  // namespace

void AddTokenizeCommand(Cli& cli) {
  auto [app, o] = cli.Add<TokenizeOptions>(
      "tokenize", "--tokenizer DIR --text TEXT|--file F|--ids 1,2,3",
      "text to ids, or ids to text, with a backbone's own tokenizer.json or tokenizer.model",
      [](const TokenizeOptions& o) { return ExitCode(RunTokenize(o)); });
  app->add_option("--tokenizer", o->tokenizer,
                  "a checkpoint or tokenizer folder (tokenizer.json or tokenizer.model), or the file itself")
      ->required();
  auto* input = app->add_option_group("input");
  input->add_option("--text", o->text, "the text to encode");
  input->add_option("--file", o->file, "a UTF-8 file to encode");
  input->add_option("--ids", o->ids, "ids to decode (comma- or space-separated)");
  input->require_option(1);
  app->add_flag("--special", o->special, "encoding: add the template's BOS/EOS");
  app->add_flag("--skip-special", o->skip_special, "decoding: leave special tokens out");
  app->add_flag("--show-tokens", o->show_tokens, "print each id's token as the vocabulary spells it");
  app->add_flag("--json", o->json, "print JSON");
}

}  // namespace hilnas::tools
