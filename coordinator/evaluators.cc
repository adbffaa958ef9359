#include "coordinator/evaluators.h"

#include "absl/strings/str_cat.h"
#include "quality/tokens.h"
#include "quality/trainer.h"
#include "util/status_macros.h"

namespace hilnas {

BackboneLoader DefaultBackboneLoader() {
  return [](const CampaignConfig& c) -> absl::StatusOr<std::unique_ptr<Backbone>> {
    HILNAS_ASSIGN_OR_RETURN(Backbone b,
                            LoadBackbone(c.backbone_checkpoint(), c.backbone_metrics()));
    return std::make_unique<Backbone>(std::move(b));
  };
}

EvaluatorFactory DefaultEvaluatorFactory(std::map<std::string, std::string> commands) {
  return [commands = std::move(commands)](
             const CampaignConfig& c,
             const Backbone& backbone) -> absl::StatusOr<std::unique_ptr<QualityEvaluator>> {
    if (c.quality_evaluator() != "in-process") {
      auto it = commands.find(c.quality_evaluator());
      if (it == commands.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("quality_evaluator \"", c.quality_evaluator(),
                         "\" is not defined on this coordinator's command line "
                         "(--evaluator NAME=TEMPLATE)"));
      }
      return NewExternalCommandEvaluator(it->second, c.quality_timeout_s());
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
