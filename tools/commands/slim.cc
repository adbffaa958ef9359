// `hilnas slim`: Slim Attention's K-only KV cache for a multi-head
// checkpoint: W_KV = W_K^-1 W_V stored instead of W_V, checked by condition
// number, reconstruction error and greedy tokens.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/generate.h"
#include "model/slim.h"
#include "search_space/counts.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "util/status_macros.h"

namespace hilnas::tools {
namespace {

struct SlimCommandOptions {
  std::string in;
  std::string out;
  bool overwrite = false;
  std::string dtype = "f32";
  double max_condition = 1e5;
  double max_error = 1e-3;
};

absl::Status RunSlim(const SlimCommandOptions& cl) {
  const std::string in = cl.in, out = cl.out;
  HILNAS_ASSIGN_OR_RETURN(OutputFolder dest, OutputFolder::Prepare(out, cl.overwrite, {in}));
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeOf(cl.dtype));
  HILNAS_ASSIGN_OR_RETURN(Decoder standard, LoadCheckpoint(in));
  SlimOptions o;
  o.storage = storage;
  o.max_condition = cl.max_condition;
  o.max_relative_error = cl.max_error;
  SlimReport report;
  auto slim = ConvertToSlim(standard, o, &report);
  if (!slim.ok()) {
    return absl::Status(slim.status().code(), absl::StrCat(in, ": ", slim.status().message()));
  }
  std::printf("%s", report.ToText().c_str());
  // Check the conversion where it matters: the same greedy tokens.
  GenerateOptions g;
  g.max_new_tokens = 64;
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < 64; ++i) prompt.push_back((i * 37 + 11) % standard.arch().vocab_size);
  HILNAS_ASSIGN_OR_RETURN(Generation a, GreedyGenerate(standard, prompt, g));
  HILNAS_ASSIGN_OR_RETURN(Generation b, GreedyGenerate(*slim, prompt, g));
  int64_t same = 0;
  while (same < static_cast<int64_t>(a.tokens.size()) && a.tokens[same] == b.tokens[same]) ++same;
  std::printf("greedy check: %lld of %zu tokens identical before the first difference\n",
              static_cast<long long>(same), a.tokens.size());
  HILNAS_RETURN_IF_ERROR(SaveCheckpoint(*slim, dest.staging(), storage));
  HILNAS_RETURN_IF_ERROR(dest.Commit());
  const int64_t ctx = 4096;
  std::printf("wrote %s (kv_cache slim): KV cache at %lld tokens %s -> %s bytes (fp32)\n",
              out.c_str(), static_cast<long long>(ctx),
              WithCommas(KvCacheBytes(standard.arch(), ctx, 4)).c_str(),
              WithCommas(KvCacheBytes(slim->arch(), ctx, 4)).c_str());
  return absl::OkStatus();
}

}  // namespace

void AddSlimCommand(Cli& cli) {
  auto [app, o] = cli.Add<SlimCommandOptions>(
      "slim", "--in CKPT --out CKPT [--dtype f32|f16|bf16 --max-condition 1e5 --max-error 1e-3]",
      "K-only KV cache: store W_KV = W_K^-1 W_V (MHA checkpoints)",
      [](const SlimCommandOptions& o) { return ExitCode(RunSlim(o)); });
  app->add_option("--in", o->in, "the standard-cache checkpoint to convert")->required();
  app->add_option("--out", o->out, "the slim checkpoint's folder")->required();
  app->add_flag("--overwrite", o->overwrite, "replace an existing non-empty --out");
  app->add_option("--dtype", o->dtype, "storage dtype f32 | f16 | bf16");
  app->add_option("--max-condition", o->max_condition,
                  "largest accepted condition number of a layer's W_K")
      ->check(CLI::PositiveNumber);
  app->add_option("--max-error", o->max_error,
                  "largest accepted relative error of W_K W_KV against W_V in the stored dtype")
      ->check(CLI::PositiveNumber);
}

}  // namespace hilnas::tools
