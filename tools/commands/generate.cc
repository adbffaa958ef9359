// `hilnas generate`: a checkpoint's greedy continuation of a prompt (text
// for byte-level vocabularies, ids otherwise), and optionally every prompt
// position's logits as a .npy file (tests/reference compares them with an
// independent implementation).
#include <torch/torch.h>

#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/checkpoint.h"
#include "model/generate.h"
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
};

absl::StatusOr<std::vector<int64_t>> PromptIds(const GenerateOptionsOfCommand& cl, const Arch& arch) {
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
  } else if (!cl.prompt.empty()) {
    if (arch.vocab_size != 256) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt TEXT needs a byte-level vocabulary (256), this model has ",
                       arch.vocab_size, ": give --prompt-ids with ids from its tokenizer"));
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

absl::Status RunGenerate(const GenerateOptionsOfCommand& cl) {
  HILNAS_ASSIGN_OR_RETURN(Decoder model, LoadForCommand(cl.ckpt, cl.threads, 128));
  HILNAS_ASSIGN_OR_RETURN(std::vector<int64_t> prompt, PromptIds(cl, model.arch()));
  if (!cl.logits_out.empty()) HILNAS_RETURN_IF_ERROR(WriteLogitsNpy(model, prompt, cl.logits_out));
  GenerateOptions o;
  o.max_new_tokens = cl.max_new_tokens;
  HILNAS_ASSIGN_OR_RETURN(Generation g, GreedyGenerate(model, prompt, o));
  if (model.arch().vocab_size == 256) {
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
      "greedy continuation: text for byte-level vocabularies, ids otherwise",
      [](const GenerateOptionsOfCommand& o) { return ExitCode(RunGenerate(o)); });
  app->add_option("--ckpt", o->ckpt, "the checkpoint")->required();
  CLI::Option* text = app->add_option("--prompt", o->prompt, "prompt text (byte-level vocabularies)");
  app->add_option("--prompt-ids", o->prompt_ids, "prompt token ids, comma-separated")
      ->excludes(text);
  app->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app->add_option("--logits-out", o->logits_out,
                  "write the prompt positions' logits here (.npy, float32)");
  AddThreadsFlag(app, &o->threads);
  cli.StableTiming(app, &o->threads);
}

}  // namespace hilnas::tools
