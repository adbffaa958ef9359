// `hilnas slim` (Slim Attention conversion) and `hilnas ppd` (Predictive
// Pipelined Decoding measurement): the two exact decode-side options.
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/checkpoint.h"
#include "model/generate.h"
#include "model/ppd.h"
#include "model/slim.h"
#include "quality/tokens.h"
#include "search_space/counts.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "util/status_macros.h"

ABSL_DECLARE_FLAG(double, heldout);
ABSL_DECLARE_FLAG(std::string, tokens);

ABSL_FLAG(std::string, in, "", "slim: the standard-cache checkpoint to convert");
ABSL_FLAG(double, max_condition, 1e5, "slim: largest accepted condition number of a layer's W_K");
ABSL_FLAG(double, max_error, 1e-3,
          "slim: largest accepted relative error of W_K W_KV against W_V in the stored dtype");
ABSL_FLAG(int32_t, layer, 0, "ppd: early-prediction layer d_bar (d/2 <= d_bar < d)");
ABSL_FLAG(int32_t, k, 1, "ppd: early candidates, one sub-computation (compute unit) each");
ABSL_FLAG(int32_t, prompts, 4, "ppd: held-out prompts taken from --tokens");

namespace hilnas::tools {
namespace {

namespace fs = std::filesystem;

// Whether the user moved a flag off its default (the shared
// --max-new-tokens defaults to 16, too few for a decode measurement).
bool Changed(const char* flag) {
  const absl::CommandLineFlag* f = absl::FindCommandLineFlag(flag);
  return f != nullptr && f->CurrentValue() != f->DefaultValue();
}

absl::Status RunSlim() {
  const std::string in = absl::GetFlag(FLAGS_in), out = absl::GetFlag(FLAGS_out);
  if (in.empty() || out.empty()) {
    return absl::InvalidArgumentError("slim needs --in CKPT and --out CKPT");
  }
  std::error_code ec;
  if (fs::exists(out, ec) && !fs::is_empty(out, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat("--out ", out, " exists and is not empty; choose a new folder"));
  }
  HILNAS_ASSIGN_OR_RETURN(StorageDtype storage, StorageDtypeFromFlags());
  HILNAS_ASSIGN_OR_RETURN(Decoder standard, LoadCheckpoint(in));
  SlimOptions o;
  o.storage = storage;
  o.max_condition = absl::GetFlag(FLAGS_max_condition);
  o.max_relative_error = absl::GetFlag(FLAGS_max_error);
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
  HILNAS_RETURN_IF_ERROR(SaveCheckpoint(*slim, out, storage));
  const int64_t ctx = 4096;
  std::printf("wrote %s (kv_cache slim): KV cache at %lld tokens %s -> %s bytes (fp32)\n",
              out.c_str(), static_cast<long long>(ctx),
              WithCommas(KvCacheBytes(standard.arch(), ctx, 4)).c_str(),
              WithCommas(KvCacheBytes(slim->arch(), ctx, 4)).c_str());
  return absl::OkStatus();
}

absl::Status RunPpd() {
  const std::string ckpt = absl::GetFlag(FLAGS_ckpt);
  if (ckpt.empty()) return absl::InvalidArgumentError("ppd needs --ckpt CKPT");
  HILNAS_ASSIGN_OR_RETURN(Decoder decoder, LoadCheckpoint(ckpt));
  const Arch& a = decoder.arch();
  // Real text for the match rate and the prompts: --tokens, else the
  // checkpoint's own corpus (`hilnas backbone` leaves one), else the demo
  // corpus built in memory from Debian's English text.
  std::string tokens = absl::GetFlag(FLAGS_tokens);
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
  p.layer = absl::GetFlag(FLAGS_layer);
  p.k = absl::GetFlag(FLAGS_k);
  p.generate.max_new_tokens = Changed("max_new_tokens") ? absl::GetFlag(FLAGS_max_new_tokens) : 256;
  p.generate.prefill_chunk = absl::GetFlag(FLAGS_prefill_chunk);
  const int64_t prompt_tokens = absl::GetFlag(FLAGS_prompt_tokens);
  HILNAS_ASSIGN_OR_RETURN(
      TokenSplit split,
      SplitTokens(std::move(ids), absl::GetFlag(FLAGS_heldout), prompt_tokens + 1));
  HILNAS_ASSIGN_OR_RETURN(
      auto prompts,
      EvenlySpacedPrompts(split.heldout, absl::GetFlag(FLAGS_prompts), prompt_tokens));
  HILNAS_RETURN_IF_ERROR(ValidatePpdOptions(a, p));  // before the long part
  const bool json = absl::GetFlag(FLAGS_json);
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
    std::printf(
        "{\"layer\": %d, \"k\": %d, \"p_correct_text\": %.4f, \"p_correct_run\": %.4f, "
        "\"greedy_ms_per_token\": %.4f, \"predicted_ms_per_token\": %.4f, "
        "\"measured_ms_per_token\": %.4f, \"predicted_latency_ratio\": %.4f, "
        "\"measured_latency_ratio\": %.4f, \"predicted_compute_ratio\": %.4f, "
        "\"measured_compute_ratio\": %.4f, \"identical\": true}\n",
        p.layer, p.k, p_text, cmp.counts.p_correct(), greedy, greedy * pred.latency_ratio,
        cmp.ppd_ms_per_token, pred.latency_ratio, cmp.latency_ratio, pred.compute_ratio,
        cmp.compute_ratio);
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

int SlimCommand(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("hilnas slim takes no arguments"));
  absl::Status s = RunSlim();
  return s.ok() ? 0 : Fail(s);
}

int PpdCommand(const std::vector<std::string>& args) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("hilnas ppd takes no arguments"));
  UseOneThreadPerUnit();
  absl::Status s = RunPpd();
  return s.ok() ? 0 : Fail(s);
}

}  // namespace hilnas::tools
