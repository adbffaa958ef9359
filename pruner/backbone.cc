#include "pruner/backbone.h"

#include <map>
#include <stdexcept>

#include "model/kv_prediction.h"
#include "model/slim.h"
#include "util/status_macros.h"

namespace hilnas {

absl::StatusOr<Backbone> LoadBackbone(const std::string& dir, std::string metrics_path) {
  if (metrics_path.empty()) metrics_path = MetricsFileName(dir);
  Backbone b;
  b.dir = dir;
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<CheckpointReader> reader, CheckpointReader::Open(dir));
  // A bf16 backbone stays bf16: pruning only selects and copies weights, so
  // every value is kept exactly at half the memory of f32 (a 1.8B backbone:
  // 3.6 GB instead of 7.2).
  HILNAS_ASSIGN_OR_RETURN(Decoder model, reader->Load(reader->stored_dtype()));
  b.model = std::make_unique<Decoder>(std::move(model));
  HILNAS_ASSIGN_OR_RETURN(b.metrics, LoadMetrics(metrics_path));
  // The fingerprint was taken while the weights were read: no file is opened twice.
  HILNAS_RETURN_IF_ERROR(CheckMetricsMatch(b.metrics, metrics_path, *reader));
  return b;
}

namespace {

absl::StatusOr<Decoder> Cut(Backbone& backbone, const Arch& target, const PruneOptions& options,
                            PrunePlan* plan_out = nullptr) {
  HILNAS_ASSIGN_OR_RETURN(PrunePlan plan,
                          PlanPrune(backbone.metrics, backbone.model->arch(), target, options));
  if (plan_out != nullptr) *plan_out = plan;
  return ApplyPrune(*backbone.model, plan, target);
}

absl::Status WriteCandidate(Backbone& backbone, const Arch& target, const PruneOptions& options,
                            const std::string& out_dir, StorageDtype dtype, PrunePlan* plan) {
  if (target.kv_cache == KvLayout::kSlim) {
    // Slim Attention Eq. 4: prune the standard twin, then store W_KV.
    Arch standard = target;
    standard.kv_cache = KvLayout::kStandard;
    HILNAS_ASSIGN_OR_RETURN(Decoder pruned, Cut(backbone, standard, options, plan));
    SlimOptions slim_options;
    slim_options.storage = dtype;
    HILNAS_ASSIGN_OR_RETURN(Decoder slim, ConvertToSlim(pruned, slim_options));
    return SaveCheckpoint(slim, out_dir, dtype);
  }
  if (target.kv_prediction.kind == KvPredictionSpec::Kind::kNone) {
    HILNAS_ASSIGN_OR_RETURN(Decoder pruned, Cut(backbone, target, options, plan));
    return SaveCheckpoint(pruned, out_dir, dtype);
  }
  // A KV-prediction candidate (KV Prediction Sec. 4): the base is pruned as
  // any target; a KVP-C auxiliary is pruned from the same backbone (its
  // retained layers and channels), a KVP-LP one is the base's retained
  // layers (KvPredictor::Create); maps start as the identity.
  Arch plain = target;
  plain.kv_prediction = KvPredictionSpec();
  HILNAS_ASSIGN_OR_RETURN(Decoder pruned, Cut(backbone, plain, options, plan));
  try {
    HILNAS_ASSIGN_OR_RETURN(Decoder base, Decoder::Create(target, 0, pruned.dtype()));
    torch::NoGradGuard no_grad;
    std::map<std::string, torch::Tensor> from;
    for (auto& [name, t] : pruned.NamedTensors()) from[name] = t;
    for (auto& [name, t] : base.NamedTensors()) t.copy_(from.at(name));
    std::shared_ptr<Decoder> aux;
    if (target.kv_prediction.kind == KvPredictionSpec::Kind::kCanonical) {
      HILNAS_ASSIGN_OR_RETURN(Decoder a, Cut(backbone, target.kv_prediction.canonical[0], options));
      aux = std::make_shared<Decoder>(std::move(a));
    }
    HILNAS_ASSIGN_OR_RETURN(
        KvPredictor kvp, KvPredictor::Create(std::make_shared<Decoder>(std::move(base)), 0, aux));
    return SaveKvpCheckpoint(kvp, out_dir, dtype);
  } catch (const std::out_of_range& e) {
    return absl::InternalError(absl::StrCat("KV-prediction candidate: ", e.what()));
  }
}

}  // namespace

absl::Status PruneToCheckpoint(Backbone& backbone, const Arch& target, const PruneOptions& options,
                               const std::string& out_dir, StorageDtype dtype, PrunePlan* plan) {
  HILNAS_RETURN_IF_ERROR(WriteCandidate(backbone, target, options, out_dir, dtype, plan));
  // The candidate speaks the backbone's vocabulary: its tokenizer goes with it.
  return CopyTokenizerFiles(backbone.dir, out_dir);
}

}  // namespace hilnas
