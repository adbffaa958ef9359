// `hilnas eval`: a checkpoint's held-out loss, perplexity and speed on a
// token file, with the trainer's windows; `hilnas generate`: its greedy
// continuation of a prompt (text for byte-level vocabularies, ids
// otherwise), and optionally every prompt position's logits as a .npy file
// (tests/reference compares them with an independent implementation).
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/checkpoint.h"
#include "model/generate.h"
#include "quality/trainer.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "util/npy.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {

absl::StatusOr<Decoder> LoadForCommand(const CommandLine& cl) {
  if (cl.ckpt.empty()) return absl::InvalidArgumentError("give --ckpt DIR");
  HILNAS_RETURN_IF_ERROR(ApplyThreads(cl));
  HILNAS_ASSIGN_OR_RETURN(Arch arch, ReadConfigJson(cl.ckpt + "/config.json"));
  HILNAS_RETURN_IF_ERROR(CheckFitsInMemory(arch, std::max<int64_t>(cl.seq_len, 1) + 1, 4,
                                           absl::StrCat("checkpoint ", cl.ckpt)));
  return LoadCheckpoint(cl.ckpt);
}

absl::Status RunEval(const CommandLine& cl) {
  if (cl.tokens.empty()) return absl::InvalidArgumentError("eval needs --tokens FILE");
  HILNAS_ASSIGN_OR_RETURN(Decoder model, LoadForCommand(cl));
  const Arch& arch = model.arch();
  if (cl.seq_len < 2 || cl.windows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seq-len ", cl.seq_len, " and --windows ", cl.windows, " must be >= 2, 1"));
  }
  // The trainer's split and windows: the file's tail, evenly spaced windows.
  HILNAS_ASSIGN_OR_RETURN(TokenSplit split,
                          LoadSplit(cl.tokens, arch.vocab_size, cl.seq_len, cl.heldout));
  const auto t0 = std::chrono::steady_clock::now();
  HILNAS_ASSIGN_OR_RETURN(double loss, HeldOutLoss(model, split.heldout, cl.seq_len, cl.windows));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t windows =
      std::min<int64_t>(cl.windows, static_cast<int64_t>(split.heldout.size()) / (cl.seq_len + 1));
  const double tokens = static_cast<double>(windows * cl.seq_len);
  std::printf(
      "%s on %s: held-out loss %.4f nats/token, perplexity %.3f (%lld windows of %lld tokens "
      "from the last %.0f%%; %.0f tokens/s)\n",
      cl.ckpt.c_str(), cl.tokens.c_str(), loss, std::exp(loss), static_cast<long long>(windows),
      static_cast<long long>(cl.seq_len), 100 * cl.heldout, tokens / std::max(s, 1e-9));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> PromptIds(const CommandLine& cl, const Arch& arch) {
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

absl::Status RunGenerate(const CommandLine& cl) {
  HILNAS_ASSIGN_OR_RETURN(Decoder model, LoadForCommand(cl));
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

int EvalCommand(const std::vector<std::string>&, const CommandLine& cl) {
  absl::Status s = RunEval(cl);
  return s.ok() ? 0 : Fail(s);
}

int GenerateCommand(const std::vector<std::string>&, const CommandLine& cl) {
  absl::Status s = RunGenerate(cl);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace hilnas::tools
