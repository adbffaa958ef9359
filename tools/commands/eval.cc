// `hilnas eval`: a checkpoint's held-out loss, perplexity and speed on a
// token file, with the trainer's windows.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "quality/trainer.h"
#include "tools/commands/commands.h"
#include "tools/commands/corpus.h"
#include "tools/common.h"
#include "util/status_macros.h"

namespace hilnas::tools {
namespace {

struct EvalOptions {
  std::string ckpt;
  std::string tokens;
  int64_t seq_len = 128;
  int64_t windows = 64;
  double heldout = 0.05;
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
  if (cl.seq_len < 2 || cl.windows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seq-len ", cl.seq_len, " and --windows ", cl.windows, " must be >= 2, 1"));
  }
  HILNAS_RETURN_IF_ERROR(CheckTokenizerMatches(cl.ckpt, cl.tokens));
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
      "%s (%s weights, %s KV cache) on %s: held-out loss %.6f nats/token, perplexity %.3f (%lld "
      "windows of %lld tokens from the last %.0f%%; %.0f tokens/s)\n",
      cl.ckpt.c_str(), cl.weight_dtype.c_str(), cl.kv_dtype.c_str(), cl.tokens.c_str(), loss,
      std::exp(loss), static_cast<long long>(windows), static_cast<long long>(cl.seq_len),
      100 * cl.heldout, tokens / std::max(s, 1e-9));
  return absl::OkStatus();
}

}  // namespace

void AddEvalCommand(Cli& cli) {
  auto [app, o] = cli.Add<EvalOptions>(
      "eval",
      "--ckpt DIR --tokens FILE [--seq-len 128 --windows 64 --heldout 0.05 --threads T\n"
      "    --weight-dtype f32|bf16|f16|q4_0|q8_0 --kv-dtype f32|f16|q8_0]",
      "held-out loss (nats/token), perplexity and tokens/s with the trainer's windows",
      [](const EvalOptions& o) { return ExitCode(RunEval(o)); });
  app->add_option("--ckpt", o->ckpt, "the checkpoint")->required();
  app->add_option("--tokens", o->tokens, "token file (uint16 ids; *.u32 for uint32)")->required();
  app->add_option("--seq-len", o->seq_len, "tokens per window");
  app->add_option("--windows", o->windows, "held-out windows (the trainer's eval_windows)");
  app->add_option("--heldout", o->heldout, "fraction of the token file's tail held out")
      ->check(CLI::Range(0.0, 0.9));
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
