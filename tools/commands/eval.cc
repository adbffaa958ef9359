// `hilnas eval`: a checkpoint's loss, perplexity and speed on a token file
// (all of it by default, or its tail with --heldout) or on a text file read
// with the checkpoint's own tokenizer.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "quality/tokens.h"
#include "quality/train_util.h"
#include "tokenizer/tokenizer.h"
#include "model/checkpoint.h"
#include "quality/trainer.h"
#include "tools/commands/commands.h"
#include "tools/commands/corpus.h"
#include "tools/common.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {

struct EvalOptions {
  std::string ckpt;
  std::string tokens;
  std::string text;     // a UTF-8 file, encoded with the checkpoint's tokenizer
  int64_t seq_len = 128;
  int64_t windows = 0;  // 0: every window
  double heldout = 0;   // 0: the whole file; F: its last F (the trainer's split)
  int32_t threads = 0;
  std::string weight_dtype = "f32";
  std::string kv_dtype = "f32";
};

absl::Status RunEval(const EvalOptions& cl) {
  // The loss the deployed model has: its matrices stored as they ship.
  HILNAS_ASSIGN_OR_RETURN(Decoder model,
                          LoadForCommand(cl.ckpt, cl.threads, cl.seq_len, cl.weight_dtype));
  HILNAS_RETURN_IF_ERROR(model.SetKvDtype(cl.kv_dtype));
  const Arch& arch = model.arch();
  if (cl.seq_len < 2 || cl.windows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seq-len ", cl.seq_len, " and --windows ", cl.windows, " must be >= 2, 0"));
  }
  HILNAS_RETURN_IF_ERROR(CheckTokenizerMatches(cl.ckpt, cl.tokens));
  // What is scored: the whole token file, its tail (--heldout, the trainer's
  // split), or a text file through the checkpoint's tokenizer.
  std::vector<int32_t> ids;
  std::string source = cl.tokens;
  if (!cl.text.empty()) {
    HILNAS_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromDir(cl.ckpt));
    std::string text;
    HILNAS_RETURN_IF_ERROR(ReadFileToString(cl.text, &text));
    auto encoded = tok.Encode(text, /*add_special_tokens=*/true);
    if (!encoded.ok()) return absl::InvalidArgumentError(absl::StrCat(cl.text, ": ", encoded.status().message()));
    ids = *std::move(encoded);
    source = cl.text;
  } else {
    HILNAS_RETURN_IF_ERROR(CheckTokenizerMatches(cl.ckpt, cl.tokens));
    HILNAS_ASSIGN_OR_RETURN(ids, ReadTokenFile(cl.tokens, arch.vocab_size));
  }
  if (cl.heldout > 0 && cl.heldout < 1) {
    const size_t tail = static_cast<size_t>(cl.heldout * static_cast<double>(ids.size()));
    ids.erase(ids.begin(), ids.end() - static_cast<std::ptrdiff_t>(tail));
  }
  if (static_cast<int64_t>(ids.size()) < cl.seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": ", ids.size(), " tokens", cl.heldout > 0 && cl.heldout < 1 ? " in the held-out tail" : "",
        " do not fill one window of --seq-len ", cl.seq_len, " + 1"));
  }
  const int64_t windows = static_cast<int64_t>(
      HeldOutOffsets(static_cast<int64_t>(ids.size()), cl.seq_len,
                     cl.windows > 0 ? cl.windows : std::numeric_limits<int64_t>::max())
          .size());
  std::fprintf(stderr, "scoring %lld windows of %lld tokens from %s\n",
               static_cast<long long>(windows), static_cast<long long>(cl.seq_len), source.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  HILNAS_ASSIGN_OR_RETURN(double loss, HeldOutLoss(model, ids, cl.seq_len, windows));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double tokens = static_cast<double>(windows * cl.seq_len);
  const std::string part = cl.heldout > 0 && cl.heldout < 1
                               ? absl::StrFormat("the last %.0f%%", 100 * cl.heldout)
                               : std::string("the whole file");
  std::printf(
      "%s (%s weights, %s KV cache) on %s: held-out loss %.6f nats/token, perplexity %.3f (%lld "
      "windows of %lld tokens from %s; %.0f tokens/s)\n",
      cl.ckpt.c_str(), cl.weight_dtype.c_str(), cl.kv_dtype.c_str(), source.c_str(), loss,
      std::exp(loss), static_cast<long long>(windows), static_cast<long long>(cl.seq_len),
      part.c_str(), tokens / std::max(s, 1e-9));
  return absl::OkStatus();
}

}  // namespace

void AddEvalCommand(Cli& cli) {
  auto [app, o] = cli.Add<EvalOptions>(
      "eval",
      "--ckpt DIR --tokens FILE|--text FILE [--seq-len 128 --windows 0 --heldout 0 --threads T\n"
      "    --weight-dtype f32|bf16|f16|q4_0|q8_0 --kv-dtype f32|f16|q8_0]",
      "loss (nats/token), perplexity and tokens/s on a token file or text, with the trainer's windows",
      [](const EvalOptions& o) { return ExitCode(RunEval(o)); });
  app->add_option("--ckpt", o->ckpt, "the checkpoint")->required();
  auto* input = app->add_option_group("input");
  input->add_option("--tokens", o->tokens, "token file (uint16 ids; *.u32 for uint32; .npy)");
  input->add_option("--text", o->text, "a UTF-8 text file, read with the checkpoint's tokenizer");
  input->require_option(1);
  app->add_option("--seq-len", o->seq_len, "tokens per window");
  app->add_option("--windows", o->windows,
                  "evenly spaced windows to score (0: every window; the trainer uses its eval_windows)");
  app->add_option("--heldout", o->heldout,
                  "score only this tail fraction (the trainer's held-out split); 0 or 1: the whole file")
      ->check(CLI::Range(0.0, 1.0));
  app->add_option("--weight-dtype", o->weight_dtype,
                  "evaluate with the matrices stored as f32, bf16, f16, q4_0 or q8_0 (the loss "
                  "after quantization)");
  app->add_option("--kv-dtype", o->kv_dtype,
                  "evaluate with the KV cache stored as f32, f16 or q8_0 (every window runs "
                  "through a cache)");
  AddThreadsFlag(app, &o->threads);
  cli.StableTiming(app, &o->threads);
}

}  // namespace hilnas::tools
