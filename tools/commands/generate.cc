// `hilnas generate`: a checkpoint's greedy continuation of a prompt, as text
// streamed while it is produced (through the checkpoint's tokenizer.json, or
// bytes for a 256-id vocabulary without one) or as ids (--ids), and
// optionally every prompt position's logits as a .npy file (tests/reference
// compares them with an independent implementation).
#include <torch/torch.h>

#include <cstdio>
#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/checkpoint.h"
#include "model/generate.h"
#include "tokenizer/tokenizer.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "util/files.h"
#include "util/textproto.h"
#include "util/npy.h"
#include "util/status_macros.h"

namespace hilnas::tools {
namespace {

struct GenerateOptionsOfCommand {
  std::string ckpt;
  std::string prompt;
  std::string prompt_ids;
  int64_t max_new_tokens = 16;
  std::string logits_out;
  int32_t threads = 0;
  bool ids = false;         // print generated ids, not text
  bool ignore_eos = false;  // go on past the tokenizer's end-of-text token
};

absl::StatusOr<std::vector<int64_t>> PromptIds(const GenerateOptionsOfCommand& cl, const Arch& arch,
                                               const tokenizer::Tokenizer* tok) {
  std::vector<int64_t> prompt;
  if (!cl.prompt_ids.empty()) {
    for (absl::string_view part : absl::StrSplit(cl.prompt_ids, ',', absl::SkipWhitespace())) {
      int64_t id = 0;
      if (!absl::SimpleAtoi(part, &id)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--prompt-ids: \"", part, "\" is not an id"));
      }
      prompt.push_back(id);
    }
  } else if (!cl.prompt.empty() && tok != nullptr) {
    // The template's BOS/EOS, as the model saw text in training.
    HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok->Encode(cl.prompt, true));
    prompt.assign(ids.begin(), ids.end());
  } else if (!cl.prompt.empty()) {
    if (arch.vocab_size != 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt TEXT needs the checkpoint's tokenizer.json (", cl.ckpt,
                       " has none) or a byte-level vocabulary (256; this model has ",
                       arch.vocab_size, "): add tokenizer.json or give --prompt-ids"));
    }
    for (unsigned char c : cl.prompt) prompt.push_back(c);
  } else {
    return absl::InvalidArgumentError("give --prompt TEXT or --prompt-ids 1,2,3");
  }
  HILNAS_RETURN_IF_ERROR(ValidatePrompt(prompt, arch.vocab_size));
  return prompt;
}

// Every prompt position's logits, [T, vocab] float32, as a NumPy array.
absl::Status WriteLogitsNpy(Decoder& model, const std::vector<int64_t>& prompt,
                            const std::string& path) {
  torch::NoGradGuard no_grad;
  torch::Tensor logits;
  try {
    logits = model.Forward(torch::tensor(prompt, torch::kLong).unsqueeze(0))
                 .squeeze(0)
                 .to(torch::kFloat)
                 .contiguous();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("forward: ", e.what_without_backtrace()));
  }
  const std::string data(static_cast<const char*>(logits.data_ptr()),
                         logits.numel() * sizeof(float));
  return WriteFileAtomically(
      path, NpyBytes("<f4", absl::StrFormat("(%d, %d)", logits.size(0), logits.size(1)), data));
}

// Prints text as it grows: everything past what was printed, held back
// while it ends in an incomplete UTF-8 sequence (decoded as U+FFFD).
class TextStream {
 public:
  TextStream(const tokenizer::Tokenizer& tok, std::vector<int32_t> prompt)
      : tok_(tok), ids_(std::move(prompt)) {
    auto text = tok_.Decode(ids_);
    printed_ = text.ok() ? text->size() : 0;
  }
  void Add(int64_t id) {
    ids_.push_back(static_cast<int32_t>(id));
    auto text = tok_.Decode(ids_);
    if (!text.ok() || text->size() < printed_) return;
    if (absl::EndsWith(*text, "\xEF\xBF\xBD")) return;
    std::fwrite(text->data() + printed_, 1, text->size() - printed_, stdout);
    std::fflush(stdout);
    printed_ = text->size();
  }

 private:
  const tokenizer::Tokenizer& tok_;
  std::vector<int32_t> ids_;
  size_t printed_ = 0;
};

absl::Status RunGenerate(const GenerateOptionsOfCommand& cl) {
  HILNAS_ASSIGN_OR_RETURN(Decoder model, LoadForCommand(cl.ckpt, cl.threads, 128));
  std::optional<tokenizer::Tokenizer> tok;
  if (!tokenizer::Tokenizer::FileInDir(cl.ckpt).empty()) {
    HILNAS_ASSIGN_OR_RETURN(tok, tokenizer::Tokenizer::FromDir(cl.ckpt));
  }
  const bool bytes = !tok && model.arch().vocab_size == 256;
  HILNAS_ASSIGN_OR_RETURN(std::vector<int64_t> prompt,
                          PromptIds(cl, model.arch(), tok ? &*tok : nullptr));
  if (!cl.logits_out.empty()) HILNAS_RETURN_IF_ERROR(WriteLogitsNpy(model, prompt, cl.logits_out));
  GenerateOptions o;
  o.max_new_tokens = cl.max_new_tokens;
  std::optional<TextStream> stream;
  const bool as_text = !cl.ids && (tok || bytes);
  if (as_text && tok) {
    stream.emplace(*tok, std::vector<int32_t>(prompt.begin(), prompt.end()));
    // The prompt as the tokenizer reads it back, then the continuation.
    HILNAS_ASSIGN_OR_RETURN(std::string shown, tok->Decode({prompt.begin(), prompt.end()}, true));
    std::printf("%s", shown.c_str());
    std::fflush(stdout);
  }
  const std::optional<int32_t> eos = tok && !cl.ignore_eos ? tok->eos_id() : std::nullopt;
  o.on_token = [&](int64_t id) {
    if (stream) stream->Add(id);
    return !eos || id != *eos;
  };
  HILNAS_ASSIGN_OR_RETURN(Generation g, GreedyGenerate(model, prompt, o));
  if (stream) {
    std::printf("\n");
    std::fflush(stdout);
  } else if (as_text) {
    std::string text;
    for (int64_t id : g.tokens) text += static_cast<char>(id);
    std::printf("%s%s\n", cl.prompt.c_str(), text.c_str());
  } else {
    std::printf("%s\n", absl::StrJoin(g.tokens, ",").c_str());
  }
  std::fprintf(stderr, "%zu tokens, %.1f tokens/s decode\n", g.tokens.size(),
               g.stats.decode_tokens_per_s());
  return absl::OkStatus();
}

}  // namespace

void AddGenerateCommand(Cli& cli) {
  auto [app, o] = cli.Add<GenerateOptionsOfCommand>(
      "generate",
      "--ckpt DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-new-tokens 16 --logits-out F.npy]",
      "greedy continuation, streamed as text through the checkpoint's tokenizer (or ids)",
      [](const GenerateOptionsOfCommand& o) { return ExitCode(RunGenerate(o)); });
  app->add_option("--ckpt", o->ckpt, "the checkpoint")->required();
  CLI::Option* text = app->add_option(
      "--prompt", o->prompt, "prompt text (the checkpoint's tokenizer.json, or bytes for vocabulary 256)");
  app->add_option("--prompt-ids", o->prompt_ids, "prompt token ids, comma-separated")
      ->excludes(text);
  app->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app->add_flag("--ids", o->ids, "print the generated ids, not text");
  app->add_flag("--ignore-eos", o->ignore_eos, "generate past the tokenizer's end-of-text token");
  app->add_option("--logits-out", o->logits_out,
                  "write the prompt positions' logits here (.npy, float32)");
  AddThreadsFlag(app, &o->threads);
  cli.StableTiming(app, &o->threads);
}

}  // namespace hilnas::tools
