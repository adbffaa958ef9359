#include "coordinator/evaluators.h"

#include "quality/tokens.h"
#include "quality/trainer.h"
#include "util/status_macros.h"

namespace hilnas {

BackboneLoader DefaultBackboneLoader() {
  return [](const CampaignConfig& c) -> absl::StatusOr<std::unique_ptr<Backbone>> {
    HILNAS_ASSIGN_OR_RETURN(Backbone b, LoadBackbone(c.backbone_checkpoint(), c.backbone_metrics()));
    return std::make_unique<Backbone>(std::move(b));
  };
}

EvaluatorFactory DefaultEvaluatorFactory() {
  return [](const CampaignConfig& c,
            const Backbone& backbone) -> absl::StatusOr<std::unique_ptr<QualityEvaluator>> {
    if (c.quality_evaluator() != "in-process") {
      return NewExternalCommandEvaluator(c.quality_evaluator(), c.quality_timeout_s());
    }
    HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                            ReadTokenFile(c.tokens(), backbone.model->arch().vocab_size));
    HILNAS_ASSIGN_OR_RETURN(
        TokenSplit split,
        SplitTokens(std::move(ids), c.train().heldout_fraction(), c.train().seq_len() + 1));
    return NewInProcessEvaluator(std::make_shared<const TokenSplit>(std::move(split)),
                                 TrainOptionsFromRecipe(c.train(), c.seed()));
  };
}

}  // namespace hilnas
