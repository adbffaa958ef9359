// `hilnas run`: build a model (random weights, or a checkpoint), prefill and
// decode once, print TTFT and decode speed.
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <cstdio>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device_agent/environment.h"
#include "device_agent/protocol.h"
#include "model/blas_core.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/gemv.h"
#include "model/generate.h"
#include "model/kv_prediction.h"
#include "model/prompt_gemm.h"
#include "model/quant.h"
#include "model/runtime_tuning.h"
#include "search_space/counts.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "util/cpu_features.h"
#include "util/mapping_pages.h"
#include "util/status_macros.h"
#include "util/subprocess.h"

namespace hilnas::tools {
namespace {

struct RunOptions {
  ArchFlags model;
  std::string ckpt;
  int64_t prompt_tokens = 256;
  int64_t max_new_tokens = 16;
  int64_t prefill_chunk = 1024;
  int32_t threads = 0;
  std::string dtype = "f32";
  std::string weight_dtype = "f32";
  std::string kv_dtype = "f32";
  uint64_t seed = 0;
  int32_t warmups = 0;
  std::string gemv_form = "auto";
};

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

// `checkpoint` is the opened --ckpt, or null for --shape/--arch.
absl::StatusOr<Built> BuildModel(const RunOptions& cl, torch::Dtype dtype,
                                 CheckpointReader* checkpoint) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string ckpt = cl.ckpt;
  std::string how;
  absl::StatusOr<Decoder> decoder = absl::UnknownError("unset");
  if (cl.weight_dtype != "f32" && dtype != torch::kFloat) {
    return absl::InvalidArgumentError("--weight-dtype needs --dtype f32 (computing in f32)");
  }
  if (checkpoint != nullptr) {
    if (cl.model.given()) {
      return absl::InvalidArgumentError("give --ckpt or one of --shape/--arch, not both");
    }
    // Each matrix stored as it is read, as Create stores random ones.
    decoder = checkpoint->Load(dtype, cl.weight_dtype);
    how = absl::StrCat("weights from ", ckpt);
  } else {
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchOf(cl.model));
    // Each matrix stored as it is drawn: a q4_0 run never holds the f32
    // model (its peak RSS is the quantized weights, the cache and one
    // matrix).
    decoder = Decoder::Create(arch, cl.seed, dtype, cl.weight_dtype);
    how = absl::StrCat("random weights, seed ", cl.seed);
  }
  if (!decoder.ok()) return decoder.status();
  if (cl.weight_dtype != "f32") how += absl::StrCat(", weights stored in ", cl.weight_dtype);
  if (cl.kv_dtype != "f32") {
    HILNAS_RETURN_IF_ERROR(decoder->SetKvDtype(cl.kv_dtype));
    how += absl::StrCat(", ", cl.kv_dtype, " KV cache");
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

// `form`: the one --gemv-form named, or none to time them (auto).
int RunOnce(const RunOptions& cl, std::optional<GemvForm> form, Decoder& decoder,
            const std::string& how, double build_ms, KvPredictor* kvp = nullptr) {
  const Arch& a = decoder.arch();
  std::printf("model: %s: %d layers, d_model %d, d_ffn %d, pattern %s, %s parameters\n",
              a.name.empty() ? "(unnamed)" : a.name.c_str(), a.num_layers, a.d_model, a.d_ffn,
              PatternString(a.attention).c_str(), WithCommas(CountParameters(a).model()).c_str());
  // Where the threads may run: a timing with more threads than CPUs times
  // them sharing (util/subprocess.h: OpenMP's binding once left one CPU).
  const int threads = at::get_num_threads();
  std::printf("built in %.0f ms (%s, dtype %s, %d threads on CPUs %s)\n", build_ms, how.c_str(),
              cl.dtype.c_str(), threads, CurrentCpuList().c_str());
  if (const std::string crowded = FewerCpusThanThreads(threads); !crowded.empty()) {
    std::printf("warning: %s\n", crowded.c_str());
  }
  // The kernels as the agents tune them (model/runtime_tuning.h): the
  // decode GEMV's form (or the one --gemv-form names), the decode step's
  // thread pool, where decode attention splits, who computes the prompt's
  // products; a line each as it is set.
  const absl::StatusOr<RuntimeTuning> tuning = TuneRuntime(
      decoder, form, [](const std::string& line) { std::printf("%s\n", line.c_str()); });
  if (!tuning.ok()) return Fail(tuning.status());
  // After the prompt products' pick, which the kernels line names.
  const std::string capped = CpuFeaturesCapNote();  // util/cpu_features.h
  std::printf("kernels: prompt matrix products %s; decode %s%s%s\n",
              PromptKernelsDescription().c_str(), tuning->decode_kernel.c_str(),
              capped.empty() ? "" : "; ", capped.c_str());
  GenerateOptions o;
  o.max_new_tokens = cl.max_new_tokens;
  o.prefill_chunk = cl.prefill_chunk;
  const int64_t n = cl.prompt_tokens;
  if (n <= 0)
    return Fail(
        absl::InvalidArgumentError(absl::StrCat("--prompt-tokens ", n, " must be positive")));
  // Untimed generations first, as the agents' protocol and llama-bench run
  // them: the first prefill in a process pays for page faults, OpenBLAS's
  // and OpenMP's thread start-up and its buffers.
  auto generate = [&](const std::vector<int64_t>& tokens) {
    return kvp != nullptr ? kvp->Generate(tokens, o) : GreedyGenerate(decoder, tokens, o);
  };
  // More warm-ups while the process's memory is still settling (the agents'
  // rule, device_agent/protocol.h OneMoreWarmUp).
  bool more = false;
  for (int32_t w = 1; w <= cl.warmups || more; ++w) {
    const int64_t faults_before = MinorPageFaults();
    auto warm = generate(RandomPrompt(n, a.vocab_size, cl.seed + 999 + w));
    if (!warm.ok()) return Fail(warm.status());
    const int64_t faults = MinorPageFaults() - faults_before;
    std::printf("warm-up %d/%d: TTFT %.1f ms, decode %.2f ms/token, %lld page faults\n", w,
                std::max(w, cl.warmups), warm->stats.ttft_ms(), warm->stats.decode_ms_per_token(),
                static_cast<long long>(faults));
    more = OneMoreWarmUp(w, cl.warmups, faults, warm->stats.kv_cache_bytes);
    if (more) std::printf("memory still settling: one more warm-up\n");
  }
  const std::vector<int64_t> prompt = RandomPrompt(n, a.vocab_size, cl.seed);
  const int64_t faults_before = MinorPageFaults();
  auto g = generate(prompt);
  if (!g.ok()) return Fail(g.status());
  const int64_t faults = MinorPageFaults() - faults_before;
  const Stats& s = g->stats;
  std::printf("prompt %lld tokens (prefill chunk %lld): TTFT %.1f ms\n",
              static_cast<long long>(s.prompt_tokens), static_cast<long long>(s.prefill_chunk),
              s.ttft_ms());
  std::printf("decode %lld tokens: %.2f ms/token, %.2f tokens/s\n",
              static_cast<long long>(s.generated_tokens), s.decode_ms_per_token(),
              s.decode_tokens_per_s());
  std::printf("faults: the timed run took %lld minor page faults (its KV cache: %.1f MiB)\n",
              static_cast<long long>(faults), s.kv_cache_bytes / double(1 << 20));
  const std::vector<torch::Tensor> params = decoder.Parameters();
  int64_t weight_bytes = 0;
  for (const torch::Tensor& p : params) weight_bytes += p.nbytes();
  std::printf("memory: weights %.1f MiB as stored, peak RSS %.1f MiB\n",
              weight_bytes / double(1 << 20), PeakRssBytes() / double(1 << 20));
  // The weights' buffer (one mapping, model/decoder.cc): how much of it the
  // kernel put on huge pages, which a one-thread decode's speed follows.
  if (!params.empty()) {
    const MappingPages pages = PagesOfMapping(params.front().data_ptr());
    std::printf("pages: the weights' mapping %.1f MiB resident, %.1f MiB of it on huge pages\n",
                pages.rss_bytes / double(1 << 20), pages.huge_bytes / double(1 << 20));
  }
  std::printf("stats: %s\n", s.ToJson().c_str());
  return 0;
}

int RunRun(const RunOptions& cl) {
  if (absl::Status s = ApplyThreads(cl.threads); !s.ok()) return Fail(s);
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
  std::optional<GemvForm> form;  // parsed before anything is built
  if (cl.gemv_form != "auto") {
    absl::StatusOr<GemvForm> f = ParseGemvForm(cl.gemv_form);
    if (!f.ok()) return Fail(f.status());
    form = *f;
  }
  std::unique_ptr<CheckpointReader> checkpoint;
  if (!cl.ckpt.empty()) {
    auto opened = CheckpointReader::Open(cl.ckpt);
    if (!opened.ok()) return Fail(opened.status());
    checkpoint = *std::move(opened);
  }
  {
    absl::StatusOr<Arch> arch = checkpoint ? checkpoint->arch() : ArchOf(cl.model);
    if (!arch.ok()) return Fail(arch.status());
    const int elem = static_cast<int>(torch::elementSize(*dtype));
    if (absl::Status s = CheckFitsInMemory(*arch, prompt + generated, elem, "run"); !s.ok()) {
      return Fail(s);
    }
  }
  auto built = BuildModel(cl, *dtype, checkpoint.get());
  if (!built.ok()) return Fail(built.status());
  return RunOnce(cl, form, built->decoder, built->how, built->build_ms, built->kvp.get());
}

}  // namespace

void AddRunCommand(Cli& cli) {
  auto [app, o] = cli.Add<RunOptions>(
      "run",
      "--shape NAME|--arch FILE|--ckpt DIR [--prompt-tokens N --max-new-tokens M\n"
      "    --prefill-chunk C --threads T --dtype f32|bf16 --weight-dtype f32|bf16|f16|q4_0|q8_0 "
      "--kv-dtype f32|f16|q8_0 --seed S --warmups W --gemv-form auto|FORM]",
      "build, prefill and decode once; print TTFT and decode speed", RunRun);
  auto [shape, arch] = AddArchFlags(app, &o->model);
  app->add_option("--ckpt", o->ckpt, "checkpoint folder (config.json + model.safetensors)")
      ->excludes(shape)
      ->excludes(arch);
  app->add_option("--prompt-tokens", o->prompt_tokens, "prompt length in tokens");
  app->add_option("--max-new-tokens", o->max_new_tokens, "tokens to generate");
  app->add_option("--prefill-chunk", o->prefill_chunk,
                  "prefill chunk in tokens (MobileLLM-Flash Sec. 4.2.2)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  AddThreadsFlag(app, &o->threads);
  app->add_option("--dtype", o->dtype, "compute dtype: f32 | bf16 | f16");
  app->add_option("--weight-dtype", o->weight_dtype,
                  "store the matrices in bf16 or f16 (computed in f32, as phones run "
                  "half-precision weights), or as q4_0 / q8_0 blocks with activations "
                  "quantized to q8_0 (llama.cpp's and ExecuTorch 8da4w's scheme)");
  app->add_option("--kv-dtype", o->kv_dtype,
                  "KV cache storage: f32 | f16 (half the bytes, llama.cpp's default cache) | "
                  "q8_0 (Q8_0 blocks per head row, MobileLLM-Flash's quantized cache)");
  app->add_option("--seed", o->seed, "random seed of the weights and the prompt");
  app->add_option("--warmups", o->warmups,
                  "untimed generations of the same lengths (other prompts) before the timed "
                  "one, as agents and llama-bench run them")
      ->check(CLI::Range(0, 100));
  app->add_option("--gemv-form", o->gemv_form,
                  "how decode's kernel streams the weights: auto (time each form on these "
                  "weights and take the fastest) | one-row | one-row-prefetch | two-rows | "
                  "four-rows (every form gives the same bits)");
  cli.StableTiming(app, &o->threads);
}

}  // namespace hilnas::tools
