// `hilnas run`, `hilnas checkpoint init|check` and the interim `hilnas demo`.
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/generate.h"
#include "model/kv_prediction.h"
#include "search_space/counts.h"
#include "search_space/shapes.h"
#include "tools/commands.h"
#include "tools/flags.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {

absl::StatusOr<torch::Dtype> ComputeDtype(const std::string& name) {
  if (name == "f32") return torch::kFloat;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "f16") return torch::kHalf;
  return absl::InvalidArgumentError(
      absl::StrCat("--dtype ", name, " is not one of f32, bf16, f16"));
}

struct Built {
  Decoder decoder;
  double build_ms;
  std::string how;
  std::shared_ptr<KvPredictor> kvp;  // set for KV-prediction architectures
};

absl::StatusOr<Built> BuildModel(const CommandLine& cl, torch::Dtype dtype) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string ckpt = cl.ckpt;
  std::string how;
  absl::StatusOr<Decoder> decoder = absl::UnknownError("unset");
  if (!ckpt.empty()) {
    if (!cl.shape.empty() || !cl.arch.empty()) {
      return absl::InvalidArgumentError("give --ckpt or one of --shape/--arch, not both");
    }
    decoder = LoadCheckpoint(ckpt, dtype);
    how = absl::StrCat("weights from ", ckpt);
  } else {
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchOf(cl));
    decoder = Decoder::Create(arch, cl.seed, dtype);
    how = absl::StrCat("random weights, seed ", cl.seed);
  }
  if (!decoder.ok()) return decoder.status();
  if (cl.weight_dtype != "f32") {
    HILNAS_ASSIGN_OR_RETURN(torch::Dtype storage, ComputeDtype(cl.weight_dtype));
    if (dtype != torch::kFloat) {
      return absl::InvalidArgumentError("--weight-dtype needs --dtype f32 (computing in f32)");
    }
    HILNAS_RETURN_IF_ERROR(decoder->StoreWeightsAs(storage));
    how += absl::StrCat(", weights stored in ", cl.weight_dtype);
  }
  std::shared_ptr<KvPredictor> kvp;
  if (decoder->arch().kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    // Auxiliary prefill + predictor + one base step (KV Prediction Sec. 4.3).
    absl::StatusOr<KvPredictor> k =
        ckpt.empty() ? KvPredictor::Create(std::make_shared<Decoder>(decoder->Share()), cl.seed + 1)
                     : LoadKvpCheckpoint(ckpt, dtype);
    if (!k.ok()) return k.status();
    kvp = std::make_shared<KvPredictor>(*std::move(k));
    how += ", KV prediction from an auxiliary model";
  }
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return Built{*std::move(decoder), ms, how, kvp};
}

std::vector<int64_t> RandomPrompt(int64_t n, int64_t vocab, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 1);
  auto t = torch::randint(vocab, {n}, gen, torch::kLong);
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + n);
}

int RunOnce(const CommandLine& cl, Decoder& decoder, const std::string& how, double build_ms,
            KvPredictor* kvp = nullptr) {
  const Arch& a = decoder.arch();
  std::printf("model: %s: %d layers, d_model %d, d_ffn %d, pattern %s, %s parameters\n",
              a.name.empty() ? "(unnamed)" : a.name.c_str(), a.num_layers, a.d_model, a.d_ffn,
              PatternString(a.attention).c_str(), WithCommas(CountParameters(a).model()).c_str());
  std::printf("built in %.0f ms (%s, dtype %s, %d threads)\n", build_ms, how.c_str(),
              cl.dtype.c_str(), at::get_num_threads());
  GenerateOptions o;
  o.max_new_tokens = cl.max_new_tokens;
  o.prefill_chunk = cl.prefill_chunk;
  const int64_t n = cl.prompt_tokens;
  if (n <= 0)
    return Fail(
        absl::InvalidArgumentError(absl::StrCat("--prompt-tokens ", n, " must be positive")));
  const std::vector<int64_t> prompt = RandomPrompt(n, a.vocab_size, cl.seed);
  auto g = kvp != nullptr ? kvp->Generate(prompt, o) : GreedyGenerate(decoder, prompt, o);
  if (!g.ok()) return Fail(g.status());
  const Stats& s = g->stats;
  std::printf("prompt %lld tokens (prefill chunk %lld): TTFT %.1f ms\n",
              static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.prefill_chunk),
              s.ttft_ms());
  std::printf("decode %lld tokens: %.2f ms/token, %.2f tokens/s\n",
              static_cast<long long>(s.generated_tokens), s.decode_ms_per_token(),
              s.decode_tokens_per_s());
  std::printf("stats: %s\n", s.ToJson().c_str());
  return 0;
}

}  // namespace

int RunCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (!args.empty())
    return Fail(absl::InvalidArgumentError("hilnas run takes no positional arguments"));
  if (absl::Status s = ApplyThreads(cl); !s.ok()) return Fail(s);
  auto dtype = ComputeDtype(cl.dtype);
  if (!dtype.ok()) return Fail(dtype.status());
  // Sizes are checked before anything is built: a prompt of 4e9 tokens or a
  // model larger than memory is an error message, not an abort.
  const int64_t prompt = cl.prompt_tokens, generated = cl.max_new_tokens;
  if (prompt < 1 || generated < 0 || prompt + generated > kMaxContext) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--prompt-tokens ", prompt, " and --max-new-tokens ", generated,
                     " must be positive and together at most ", kMaxContext)));
  }
  {
    absl::StatusOr<Arch> arch =
        cl.ckpt.empty() ? ArchOf(cl) : ReadConfigJson(cl.ckpt + "/config.json");
    if (!arch.ok()) return Fail(arch.status());
    const int elem = static_cast<int>(torch::elementSize(*dtype));
    if (absl::Status s = CheckFitsInMemory(*arch, prompt + generated, elem, "run"); !s.ok()) {
      return Fail(s);
    }
  }
  auto built = BuildModel(cl, *dtype);
  if (!built.ok()) return Fail(built.status());
  return RunOnce(cl, built->decoder, built->how, built->build_ms, built->kvp.get());
}

int CheckpointCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (args.size() == 1 && args[0] == "init") {
    const std::string out = cl.out;
    if (out.empty()) return Fail(absl::InvalidArgumentError("checkpoint init needs --out DIR"));
    auto storage = StorageDtypeOf(cl);
    if (!storage.ok()) return Fail(storage.status());
    auto arch = ArchOf(cl);
    if (!arch.ok()) return Fail(arch.status());
    if (absl::Status s = CheckFitsInMemory(*arch, 0, BytesPerElement(*storage), "checkpoint init");
        !s.ok()) {
      return Fail(s);
    }
    absl::StatusOr<OutputFolder> dest = OutputFolder::Prepare(out, cl.overwrite, {});
    if (!dest.ok()) return Fail(dest.status());
    auto decoder = Decoder::Create(*arch, cl.seed);
    if (!decoder.ok()) return Fail(decoder.status());
    absl::Status s = SaveCheckpoint(*decoder, dest->staging(), *storage);
    if (s.ok()) s = dest->Commit();
    if (!s.ok()) return Fail(s);
    std::printf("wrote %s (config.json, model.safetensors; %s parameters, %s)\n", out.c_str(),
                WithCommas(CountParameters(*arch).model()).c_str(), cl.dtype.c_str());
    return 0;
  }
  if (args.size() == 2 && args[0] == "check") {
    auto decoder = LoadCheckpoint(args[1]);
    if (!decoder.ok()) return Fail(decoder.status());
    if (cl.values) {
      absl::Status finite = CheckFiniteWeights(args[1]);
      if (!finite.ok()) return Fail(finite);
    }
    const Arch& a = decoder->arch();
    std::printf("%s: ok%s: %d layers, d_model %d, d_ffn %d, pattern %s, %s parameters\n",
                args[1].c_str(), cl.values ? " (every weight finite)" : "", a.num_layers, a.d_model,
                a.d_ffn, PatternString(a.attention).c_str(),
                WithCommas(CountParameters(a).model()).c_str());
    std::printf("%s\n", DescribeArch(a).c_str());
    return 0;
  }
  return Fail(
      absl::InvalidArgumentError("usage: hilnas checkpoint init --shape NAME|--arch FILE --out DIR "
                                 "| hilnas checkpoint check DIR"));
}

// Until the search lands (issue 6), the demo shows the registry, the search
// space, one published shape built and run end to end, and a small
// architecture taken through .textproto -> checkpoint -> run.
}  // namespace hilnas::tools
