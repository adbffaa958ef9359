#include "pruner/backbone.h"

#include <filesystem>

#include "util/status_macros.h"

namespace hilnas {

absl::StatusOr<Backbone> LoadBackbone(const std::string& dir, std::string metrics_path) {
  if (metrics_path.empty()) metrics_path = (std::filesystem::path(dir) / "metrics.json").string();
  Backbone b;
  b.dir = dir;
  HILNAS_ASSIGN_OR_RETURN(Decoder model, LoadCheckpoint(dir));
  b.model = std::make_unique<Decoder>(std::move(model));
  HILNAS_ASSIGN_OR_RETURN(b.metrics, LoadMetrics(metrics_path));
  HILNAS_RETURN_IF_ERROR(CheckMetricsMatch(b.metrics, metrics_path, dir, b.model->arch()));
  return b;
}

absl::Status PruneToCheckpoint(Backbone& backbone, const Arch& target,
                               const PruneOptions& options, const std::string& out_dir,
                               StorageDtype dtype) {
  HILNAS_ASSIGN_OR_RETURN(PrunePlan plan,
                          PlanPrune(backbone.metrics, backbone.model->arch(), target, options));
  HILNAS_ASSIGN_OR_RETURN(Decoder pruned, ApplyPrune(*backbone.model, plan, target));
  return SaveCheckpoint(pruned, out_dir, dtype);
}

}  // namespace hilnas
