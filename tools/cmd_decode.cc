// `hilnas slim` (Slim Attention conversion) and `hilnas ppd` (Predictive
// Pipelined Decoding measurement): the two exact decode-side options.
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/checkpoint.h"
#include "model/generate.h"
#include "model/ppd.h"
#include "model/slim.h"
#include "nlohmann/json.hpp"
#include "quality/tokens.h"
#include "search_space/counts.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "util/status_macros.h"

namespace hilnas::tools {
namespace {

namespace fs = std::filesystem;

absl::Status RunSlim(const CommandLine& cl) {
  const std::string in = cl.in, out = cl.out;
  if (in.empty() || out.empty()) {
    return absl::InvalidArgumentError("slim needs --in CKPT and --out CKPT");
  }
  HILNAS_ASSIGN_OR_RETURN(OutputFolder dest, OutputFolder::Prepare(out, cl.overwrite, {in}));
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeOf(cl));
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

absl::Status RunPpd(const CommandLine& cl) {
  const std::string ckpt = cl.ckpt;
  if (ckpt.empty()) return absl::InvalidArgumentError("ppd needs --ckpt CKPT");
  HILNAS_ASSIGN_OR_RETURN(Decoder decoder, LoadCheckpoint(ckpt));
  const Arch& a = decoder.arch();
  // Real text for the match rate and the prompts: --tokens, else the
  // checkpoint's own corpus (`hilnas backbone` leaves one), else the demo
  // corpus built in memory from Debian's English text.
  std::string tokens = cl.tokens;
  std::vector<int32_t> ids;
  if (tokens.empty() && fs::exists(fs::path(ckpt) / "corpus.bin")) {
    tokens = (fs::path(ckpt) / "corpus.bin").string();
  }
  if (tokens.empty()) {
    CorpusManifest manifest;
    HILNAS_ASSIGN_OR_RETURN(ids, BuildByteCorpus(DefaultCorpusSources(), &manifest));
    tokens = "the demo corpus (Debian English text)";
  } else {
    HILNAS_ASSIGN_OR_RETURN(ids, ReadTokenFile(tokens, a.vocab_size));
  }
  PpdOptions p;
  p.layer = cl.layer;
  p.k = cl.k;
  p.generate.max_new_tokens =
      cl.Changed("max_new_tokens") ? cl.max_new_tokens : 256;  // 16 is too few
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

int SlimCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("hilnas slim takes no arguments"));
  absl::Status s = RunSlim(cl);
  return s.ok() ? 0 : Fail(s);
}

int PpdCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("hilnas ppd takes no arguments"));
  UseOneThreadPerUnit();
  absl::Status s = RunPpd(cl);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace hilnas::tools
