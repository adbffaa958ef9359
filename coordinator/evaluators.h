// Where the campaign runner gets what stage 2 needs: the backbone every
// proposal is pruned from, and the quality evaluator that scores it. Both
// are injected through CampaignRunner's constructor, so tests put in fakes
// and further evaluators (a Slurm cluster) plug in without the runner
// knowing their kind.
#ifndef HILNAS_COORDINATOR_EVALUATORS_H_
#define HILNAS_COORDINATOR_EVALUATORS_H_

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/campaign.pb.h"
#include "pruner/backbone.h"
#include "quality/evaluator.h"

namespace hilnas {

// Loads the campaign's backbone. Called once per campaign per coordinator
// process, on the runner's thread.
using BackboneLoader =
    std::function<absl::StatusOr<std::unique_ptr<Backbone>>(const CampaignConfig& config)>;

// Makes the evaluator the campaign names (CampaignConfig.quality_evaluator)
// for `backbone`, which outlives it. Called once per campaign per process.
using EvaluatorFactory = std::function<absl::StatusOr<std::unique_ptr<QualityEvaluator>>(
    const CampaignConfig& config, const Backbone& backbone)>;

// LoadBackbone(backbone_checkpoint, backbone_metrics).
BackboneLoader DefaultBackboneLoader();

// "in-process": short continued pretraining (TrainOptionsFromRecipe of the
// campaign's recipe and seed) on the campaign's tokens, split into training
// and held-out parts. Any other name: the command template `commands` gives
// it (the coordinator's --evaluator NAME=TEMPLATE); FAILED_PRECONDITION for
// a name it does not hold (a campaign stored by another coordinator).
EvaluatorFactory DefaultEvaluatorFactory(std::map<std::string, std::string> commands = {});

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_EVALUATORS_H_
