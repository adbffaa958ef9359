// `hilnas ppd`: Predictive Pipelined Decoding measured on a checkpoint:
// p_correct, Theorem 4.1's latency and compute against measured, and
// identity with greedy decoding.
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>

#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/ppd.h"
#include "nlohmann/json.hpp"
#include "quality/tokens.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "util/status_macros.h"

namespace hilnas::tools {
namespace {

namespace fs = std::filesystem;

struct PpdOptionsOfCommand {
  std::string ckpt;
  int32_t layer = 0;
  int32_t k = 1;
  std::string tokens;  // default CKPT/corpus.bin, else the demo corpus in memory
  int32_t prompts = 4;
  int64_t prompt_tokens = 256;
  int64_t max_new_tokens = 256;
  int64_t prefill_chunk = 1024;
  double heldout = 0.05;
  bool json = false;
};

// Real text for the match rate and the prompts: --tokens, else the
// checkpoint's own corpus (`hilnas backbone` leaves one), else the demo
// corpus built in memory from Debian's English text. `source` says which.
absl::StatusOr<std::vector<int32_t>> PpdText(const PpdOptionsOfCommand& cl, int64_t vocab,
                                             std::string* source) {
  std::string tokens = cl.tokens;
  if (tokens.empty() && fs::exists(fs::path(cl.ckpt) / "corpus.bin")) {
    tokens = (fs::path(cl.ckpt) / "corpus.bin").string();
  }
  if (!tokens.empty()) {
    *source = tokens;
    return ReadTokenFile(tokens, vocab);
  }
  CorpusManifest manifest;
  *source = "the demo corpus (Debian English text)";
  return BuildByteCorpus(DefaultCorpusSources(), &manifest);
}

absl::Status RunPpd(const PpdOptionsOfCommand& cl) {
  HILNAS_ASSIGN_OR_RETURN(Decoder decoder, LoadCheckpoint(cl.ckpt));
  const Arch& a = decoder.arch();
  std::string tokens;
  HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids, PpdText(cl, a.vocab_size, &tokens));
  PpdOptions p;
  p.layer = cl.layer;
  p.k = cl.k;
  p.generate.max_new_tokens = cl.max_new_tokens;
  p.generate.prefill_chunk = cl.prefill_chunk;
  const int64_t prompt_tokens = cl.prompt_tokens;
  HILNAS_ASSIGN_OR_RETURN(TokenSplit split,
                          SplitTokens(std::move(ids), cl.heldout, prompt_tokens + 1));
  HILNAS_ASSIGN_OR_RETURN(auto prompts,
                          EvenlySpacedPrompts(split.heldout, cl.prompts, prompt_tokens));
  HILNAS_RETURN_IF_ERROR(ValidatePpdOptions(a, p));  // before the long part
  const bool json = cl.json;
  if (!json) {
    std::printf(
        "%s: %d layers; early prediction after layer %d, top-%d (%d compute units, %d "
        "thread each)\n",
        a.name.c_str(), a.num_layers, p.layer, p.k, p.k + 1, at::get_num_threads());
    std::printf("%zu held-out prompts of %lld tokens from %s, %lld new tokens each\n",
                prompts.size(), static_cast<long long>(prompt_tokens), tokens.c_str(),
                static_cast<long long>(p.generate.max_new_tokens));
    std::fflush(stdout);
  }
  HILNAS_ASSIGN_OR_RETURN(
      MatchRates rates,
      MeasureMatchRates(decoder, prompts, p.generate.max_new_tokens, {p.layer}, {p.k}));
  HILNAS_ASSIGN_OR_RETURN(PpdComparison cmp, ComparePpdWithGreedy(decoder, prompts, p));
  if (!cmp.identical) {
    return absl::InternalError("PPD tokens differ from greedy decoding: this is a bug in hilnas");
  }
  const double p_text = rates.rate(0, 0);
  const PpdPrediction pred =
      PredictPpd(a.num_layers, p.layer, p.k, p.generate.max_new_tokens - 1, p_text);
  const double greedy = cmp.greedy_ms_per_token;
  if (json) {
    const nlohmann::json j = {{"layer", p.layer},
                              {"k", p.k},
                              {"p_correct_text", p_text},
                              {"p_correct_run", cmp.counts.p_correct()},
                              {"greedy_ms_per_token", greedy},
                              {"predicted_ms_per_token", greedy * pred.latency_ratio},
                              {"measured_ms_per_token", cmp.ppd_ms_per_token},
                              {"predicted_latency_ratio", pred.latency_ratio},
                              {"measured_latency_ratio", cmp.latency_ratio},
                              {"predicted_compute_ratio", pred.compute_ratio},
                              {"measured_compute_ratio", cmp.compute_ratio},
                              {"identical", true}};
    std::printf("%s\n", j.dump().c_str());
    return absl::OkStatus();
  }
  std::printf("p_correct: %.3f on text (%lld positions), %.3f during the PPD runs\n", p_text,
              static_cast<long long>(rates.positions), cmp.counts.p_correct());
  std::printf("%-22s %12s %10s %14s %10s\n", "", "ms/token", "latency", "layers/token", "compute");
  const double d = a.num_layers;
  std::printf("%-22s %12.3f %9.3fx %14.2f %9.2fx\n", "greedy (measured)", greedy, 1.0, d, 1.0);
  std::printf("%-22s %12.3f %9.3fx %14.2f %9.2fx\n", "PPD, Theorem 4.1",
              greedy * pred.latency_ratio, pred.latency_ratio, d * pred.compute_ratio,
              pred.compute_ratio);
  std::printf("%-22s %12.3f %9.3fx %14.2f %9.2fx\n", "PPD (measured)", cmp.ppd_ms_per_token,
              cmp.latency_ratio, d * cmp.compute_ratio, cmp.compute_ratio);
  std::printf("tokens identical to greedy decoding: yes (%zu x %lld)\n", prompts.size(),
              static_cast<long long>(p.generate.max_new_tokens));
  return absl::OkStatus();
}

}  // namespace

void AddPpdCommand(Cli& cli) {
  auto [app, o] = cli.Add<PpdOptionsOfCommand>(
      "ppd",
      "--ckpt CKPT --layer D --k K [--tokens FILE --prompts 4 --prompt-tokens 256\n"
      "    --max-new-tokens 256 --json]",
      "predictive pipelined decoding: p_correct, Theorem 4.1's latency and compute against\n"
      "measured, identity with greedy",
      [](const PpdOptionsOfCommand& o) {
        UseOneThreadPerUnit();
        return ExitCode(RunPpd(o));
      });
  app->add_option("--ckpt", o->ckpt, "the checkpoint")->required();
  app->add_option("--layer", o->layer, "early-prediction layer d_bar (d/2 <= d_bar < d)");
  app->add_option("--k", o->k, "early candidates, one sub-computation (compute unit) each")
      ->check(CLI::Range(1, 64));
  app->add_option("--tokens", o->tokens, "token file of held-out text");
  app->add_option("--prompts", o->prompts, "held-out prompts taken from --tokens")
      ->check(CLI::Range(1, 10'000));
  app->add_option("--prompt-tokens", o->prompt_tokens, "prompt length in tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate per prompt")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app->add_option("--prefill-chunk", o->prefill_chunk, "prefill chunk in tokens")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app->add_option("--heldout", o->heldout, "fraction of the token file's tail prompts come from")
      ->check(CLI::Range(0.0, 0.9));
  app->add_flag("--json", o->json, "one JSON line");
  cli.StableTiming(app, nullptr);
}

}  // namespace hilnas::tools
