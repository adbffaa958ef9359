// Prune(metrics, s) -> dense checkpoint (MobileLLM-Flash Sec. 3.3): keep the
// highest-energy FFN channels (per layer) and residual channels, drop the
// layers with the lowest LayerMetric until s's depth remains, apply s's
// attention pattern, and concatenate what is left into a compact dense
// model. Target widths are whole blocks (default 128, the unit group-wise
// quantisation wants); channels inside are chosen individually by energy.
// One index set per axis is applied to every tensor on that axis; heads are
// never split. A tied target of an untied backbone (MobileLLM-Flash from
// MobileLLM-Pro-Shallow) ties to the backbone's input embedding; an untied
// target of a tied backbone starts its head as the embedding. Deterministic: ties break by index, kept indices stay in
// their original order, so pruning nothing reproduces the backbone exactly.
#ifndef HILNAS_PRUNER_PRUNE_H_
#define HILNAS_PRUNER_PRUNE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/decoder.h"
#include "pruner/metrics.h"
#include "search_space/arch.h"

namespace hilnas {

struct PruneOptions {
  int block_size = 128;
};

// Which parts of the backbone a target keeps, every list ascending.
struct PrunePlan {
  std::vector<int> layers;                // backbone layer of each target layer
  std::vector<int64_t> model_dim;         // residual channels
  std::vector<std::vector<int64_t>> ffn;  // per target layer, FFN channels
};

// INVALID_ARGUMENT, naming the field, when `target` cannot be cut from
// `backbone`: other vocabulary, heads, head size or QK-norm; a
// width or depth larger than the backbone's; a width off the block grid
// (the backbone's own width is always allowed); an attention layer placed on
// a backbone layer that has none; or metrics of another shape.
absl::StatusOr<PrunePlan> PlanPrune(const ActivationMetrics& metrics, const Arch& backbone,
                                    const Arch& target, const PruneOptions& options = {});

// The target model with the backbone's weights cut by `plan`. Each kept
// layer keeps its NoPE flag (Arch::no_rope), whatever `target` says.
absl::StatusOr<Decoder> ApplyPrune(Decoder& backbone, const PrunePlan& plan, const Arch& target);

// The NoPE flags of the layers `plan` keeps (empty for a backbone without).
std::vector<bool> PrunedNoRope(const Arch& backbone, const PrunePlan& plan);

// The backbone's own shape with these overrides (0 / "" = keep): depth,
// widths and the attention pattern (one letter per target layer: F full, W
// sliding window, S skip) with its window.
absl::StatusOr<Arch> OverrideShape(const Arch& backbone, int num_layers, int d_model, int d_ffn,
                                   const std::string& pattern, int sliding_window);

}  // namespace hilnas

#endif  // HILNAS_PRUNER_PRUNE_H_
