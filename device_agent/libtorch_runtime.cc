#include "device_agent/libtorch_runtime.h"

#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "device_agent/environment.h"
#include "model/attention.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/gemv.h"
#include "model/generate.h"
#include "model/kv_prediction.h"
#include "model/ppd.h"
#include "model/prompt_gemm.h"
#include "model/quant.h"
#include "model/runtime_tuning.h"
#include "search_space/arch.h"
#include "search_space/counts.h"
#include "util/cpu_features.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

absl::StatusOr<torch::Dtype> DtypeFor(Precision p) {
  switch (p) {
    case PRECISION_UNSPECIFIED:
    case FP32:
      return torch::kFloat;
    case BF16:
      return torch::kBFloat16;
    case FP16:
      return torch::kHalf;
    case Q4_0:
    case Q8_0:
      return torch::kUInt8;  // blocks: stored as drawn (random), or quantized after loading
    default:
      return absl::UnimplementedError(absl::StrCat(
          "precision ", Precision_Name(p), " is not supported by the libtorch-cpu runtime"));
  }
}

// Allocation failures surface from libtorch as c10::Error text.
absl::Status Classify(const absl::Status& s) {
  if (absl::StrContains(s.message(), "alloc")) {
    return absl::ResourceExhaustedError(s.message());
  }
  return s;
}

class LibtorchModel : public PreparedModel {
 public:
  LibtorchModel(Decoder decoder, int64_t prefill_chunk, uint64_t seed)
      : decoder_(std::move(decoder)), prefill_chunk_(prefill_chunk), seed_(seed) {}
  // A KV-prediction architecture: TTFT is the auxiliary prefill, the
  // predictor and one base step (KV Prediction Sec. 4.4); decode is the base's.
  LibtorchModel(std::shared_ptr<KvPredictor> kvp, int64_t prefill_chunk, uint64_t seed)
      : decoder_(kvp->base().Share()),
        kvp_(std::move(kvp)),
        prefill_chunk_(prefill_chunk),
        seed_(seed) {}

  absl::StatusOr<RunTiming> Run(int prompt_tokens, int decode_tokens) override {
    if (prompt_tokens <= 0 || decode_tokens < 0) {
      return absl::InvalidArgumentError(absl::StrCat("prompt_tokens ", prompt_tokens,
                                                     " and decode_tokens ", decode_tokens,
                                                     " must be positive / non-negative"));
    }
    // Another model prepared since (at another thread count: a comparison's
    // rounds) may have changed the process's threads, decode form or split.
    if (at::get_num_threads() != threads_) at::set_num_threads(threads_);
    if (CurrentGemvForm() != form_) SetGemvForm(form_);
    if (CurrentThreadPool() != pool_) SetThreadPool(pool_);
    if (DecodeSplitWork() != split_work_) SetDecodeSplitWork(split_work_);
    if (AutoPromptGemm() != prompt_pick_) SetAutoPromptGemm(prompt_pick_);
    std::vector<int64_t> prompt;
    try {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ + prompt_tokens);
      auto t = torch::randint(decoder_.arch().vocab_size, {prompt_tokens}, gen, torch::kLong);
      prompt.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + prompt_tokens);
    } catch (const c10::Error& e) {
      return Classify(absl::InternalError(absl::StrCat("prompt: ", e.what_without_backtrace())));
    }
    GenerateOptions o;
    o.max_new_tokens = decode_tokens + 1;  // the first token closes TTFT
    o.prefill_chunk = prefill_chunk_;
    absl::StatusOr<Generation> g = Generate(prompt, o);
    if (!g.ok()) return Classify(g.status());
    RunTiming r;
    r.ttft_ms = g->stats.ttft_ms();
    r.decode_tokens = decode_tokens;
    r.decode_ms_per_token = decode_tokens > 0 ? g->stats.decode_ms_per_token() : 0.0;
    r.kv_cache_bytes = g->stats.kv_cache_bytes;
    return r;
  }

  std::string kernels() const override { return kernels_; }
  // Times the decode kernel's forms on this model's matrices at the job's
  // thread count and keeps the fastest for the runs (model/gemv.h): every
  // form gives the same bits, and which one streams fastest is the CPU's.
  // Remembers the thread count it was tuned at, and the form, for the runs.
  // Likewise where a decode query's attention starts to split over the
  // threads (model/attention.h): a thread hand-over's cost is the host's;
  // and who computes a prompt's matrix products, hilnas's AVX-512 kernel
  // or OpenBLAS (model/prompt_gemm.h): which is faster is the host's too.
  absl::Status TuneKernels() {
    threads_ = at::get_num_threads();
    HILNAS_ASSIGN_OR_RETURN(const RuntimeTuning t, TuneRuntime(decoder_));
    form_ = t.gemv->chosen;
    pool_ = t.pool.chosen;
    split_work_ = t.split.work;
    prompt_pick_ = AutoPromptGemm();
    kernels_ = absl::StrCat("prompt products ", t.prompt.Describe(), ", decode ", t.decode_kernel,
                            ", GEMV form ", t.gemv_form, ", decode thread pool ", t.pool.Describe(),
                            ", decode attention ", t.split.Describe());
    // Quantized weights: the prompt blocks this core's L2 sized (model/quant.h).
    if (!t.quantized.empty()) {
      absl::StrAppend(&kernels_, ", quantized prompt blocks ", PromptBlocksDescription());
    }
    // A capped agent prices candidates as a CPU without the dropped
    // instructions would run them; its DeviceIdentity says so.
    if (const std::string capped = CpuFeaturesCapNote(); !capped.empty()) {
      absl::StrAppend(&kernels_, "; ", capped);
    }
    return absl::OkStatus();
  }

 private:
  Decoder decoder_;
  std::shared_ptr<KvPredictor> kvp_;  // null unless the arch has an auxiliary model
  int64_t prefill_chunk_;
  uint64_t seed_;
  std::string kernels_;  // TuneKernels' report
  int threads_ = 1;      // libtorch's intra-op threads for this model's runs
  GemvForm form_ = GemvForm::kOneRow;
  ThreadPool pool_ = CurrentThreadPool();
  double split_work_ = DecodeSplitWork();
  std::optional<bool> prompt_pick_ = AutoPromptGemm();  // kAuto's, as tuned

  absl::StatusOr<Generation> Generate(const std::vector<int64_t>& prompt,
                                      const GenerateOptions& o) {
    if (kvp_ != nullptr) return kvp_->Generate(prompt, o);
    const PpdSpec& ppd = decoder_.arch().ppd;
    if (ppd.k == 0) return GreedyGenerate(decoder_, prompt, o);
    // Predictive pipelined decoding: k threads beside this one.
    PpdOptions p;
    p.layer = ppd.layer;
    p.k = ppd.k;
    p.generate = o;
    p.forced_match_rate = ppd.timing_match_rate > 0 ? ppd.timing_match_rate : -1;
    p.seed = seed_;
    auto g = PpdGenerate(decoder_, prompt, p);
    if (!g.ok()) return g.status();
    return Generation{std::move(g->tokens), g->stats};
  }
};

class LibtorchRuntime : public Runtime {
 public:
  explicit LibtorchRuntime(const LibtorchRuntimeOptions& o) : options_(o) {}
  std::string name() const override { return "libtorch-cpu"; }
  std::string version() const override { return TORCH_VERSION; }

  absl::StatusOr<std::unique_ptr<PreparedModel>> Prepare(const BenchmarkRequest& req) override {
    // BF16 and FP16 store the weights in half precision and compute in f32,
    // as phones run half-precision weights on CPUs without fast half
    // arithmetic (Decoder::StoreWeightsAs); slim caches compute in the half
    // dtype itself (their W_KV product is not a projection).
    HILNAS_ASSIGN_OR_RETURN(const torch::Dtype storage, DtypeFor(req.precision()));
    const bool quantized = storage == torch::kUInt8;
    const char* blocks = req.precision() == Q4_0 ? "q4_0" : "q8_0";  // when quantized
    torch::Dtype dtype = quantized ? torch::kFloat : storage;
    if (req.threads() > 0) at::set_num_threads(req.threads());
    int max_context = 0;
    for (int p : req.prompt_lengths()) max_context = std::max(max_context, p);
    max_context += req.decode_tokens() + 1;
    absl::StatusOr<Decoder> decoder = absl::UnknownError("unset");
    if (req.has_arch()) {
      HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchFromProto(req.arch()));
      HILNAS_RETURN_IF_ERROR(CheckFits(arch, dtype, max_context));
      if (arch.kv_cache != KvLayout::kSlim) dtype = torch::kFloat;
      // A quantized model is stored as each matrix is drawn: the job's peak
      // RSS is what the deployed model holds, not its f32 original.
      decoder = Decoder::Create(arch, req.seed(), dtype, quantized ? blocks : "f32");
    } else if (!req.checkpoint_dir().empty()) {
      HILNAS_ASSIGN_OR_RETURN(auto checkpoint, CheckpointReader::Open(req.checkpoint_dir()));
      const Arch& arch = checkpoint->arch();
      HILNAS_RETURN_IF_ERROR(CheckFits(arch, dtype, max_context));
      if (arch.kv_cache != KvLayout::kSlim) dtype = torch::kFloat;
      // A quantized model is stored as each matrix is read (never the f32
      // model whole).
      decoder = checkpoint->Load(dtype, quantized ? blocks : "f32");
    } else {
      return absl::InvalidArgumentError("benchmark request names neither arch nor checkpoint_dir");
    }
    if (!decoder.ok()) return Classify(decoder.status());
    // A quantized model was stored so by Create or Load (INVALID_ARGUMENT
    // for widths off the block: an unsupported architecture).
    if (!quantized && storage != torch::kFloat && decoder->arch().kv_cache != KvLayout::kSlim) {
      // Built in f32 (random or loaded), then its matrices narrowed.
      HILNAS_RETURN_IF_ERROR(decoder->StoreWeightsAs(storage));
    }
    if (!req.kv_dtype().empty()) {
      HILNAS_RETURN_IF_ERROR(decoder->SetKvDtype(req.kv_dtype()));
    }
    const int64_t chunk = req.prefill_chunk() > 0 ? req.prefill_chunk() : 1024;
    if (decoder->arch().kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
      // Random weights time like trained ones: the auxiliary model and maps.
      absl::StatusOr<KvPredictor> kvp =
          KvPredictor::Create(std::make_shared<Decoder>(*std::move(decoder)), req.seed() + 1);
      if (!kvp.ok()) return Classify(kvp.status());
      auto model = std::make_unique<LibtorchModel>(std::make_shared<KvPredictor>(*std::move(kvp)),
                                                   chunk, req.seed());
      HILNAS_RETURN_IF_ERROR(Classify(model->TuneKernels()));
      return std::unique_ptr<PreparedModel>(std::move(model));
    }
    auto model = std::make_unique<LibtorchModel>(*std::move(decoder), chunk, req.seed());
    HILNAS_RETURN_IF_ERROR(Classify(model->TuneKernels()));
    return std::unique_ptr<PreparedModel>(std::move(model));
  }

 private:
  absl::Status CheckFits(const Arch& arch, torch::Dtype dtype, int64_t context) const {
    const int64_t need =
        EstimateRunBytes(arch, context, static_cast<int>(torch::elementSize(dtype)));
    const int64_t limit =
        options_.memory_limit_bytes > 0 ? options_.memory_limit_bytes : MemAvailableBytes();
    if (limit > 0 && need > limit) {
      return absl::ResourceExhaustedError(
          absl::StrCat("model needs ", need / (1 << 20), " MiB for weights and KV cache at ",
                       context, " tokens; this device allows ", limit / (1 << 20), " MiB"));
    }
    return absl::OkStatus();
  }

  LibtorchRuntimeOptions options_;
};

}  // namespace

std::unique_ptr<Runtime> NewLibtorchRuntime(const LibtorchRuntimeOptions& options) {
  return std::make_unique<LibtorchRuntime>(options);
}

}  // namespace hilnas
