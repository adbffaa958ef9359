// A backbone ready to be pruned: its checkpoint loaded and its activation
// metrics checked against it. The search prunes every stage-2 proposal from
// one of these (MobileLLM-Flash Sec. 3.3, Prune(metrics, s)); `hilnas export`
// and bench/oracle_build do the same through PruneToCheckpoint.
#ifndef HILNAS_PRUNER_BACKBONE_H_
#define HILNAS_PRUNER_BACKBONE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "pruner/metrics.h"
#include "pruner/prune.h"

namespace hilnas {

struct Backbone {
  std::string dir;
  std::unique_ptr<Decoder> model;
  ActivationMetrics metrics;
};

// Loads `dir` and the metrics at `metrics_path` (default dir/metrics.json)
// and refuses metrics of another checkpoint (FAILED_PRECONDITION naming both).
absl::StatusOr<Backbone> LoadBackbone(const std::string& dir, std::string metrics_path = "");

// Prune(metrics, target) written as a dense checkpoint in `out_dir`: the
// one prune path (hilnas prune, campaigns, export): a plain target, a slim
// one (pruned, then W_KV stored, Slim Attention Eq. 4) or a KV-prediction
// one (base, auxiliary/ and the predictor). `plan`, when given, receives
// the base model's plan (kept layers and channels). INVALID_ARGUMENT (from
// PlanPrune) when the target cannot be cut from the backbone. Not
// thread-safe on the same Backbone.
absl::Status PruneToCheckpoint(Backbone& backbone, const Arch& target, const PruneOptions& options,
                               const std::string& out_dir, StorageDtype dtype = StorageDtype::kF32,
                               PrunePlan* plan = nullptr);

}  // namespace hilnas

#endif  // HILNAS_PRUNER_BACKBONE_H_
