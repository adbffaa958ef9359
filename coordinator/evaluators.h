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
#include "quality/trial_evaluator.h"

namespace hilnas {

// Loads the campaign's backbone. Called once per campaign per coordinator
// process, on the runner's thread.
using BackboneLoader =
    std::function<absl::StatusOr<std::unique_ptr<Backbone>>(const CampaignConfig& config)>;

// Makes the evaluator the campaign names (CampaignConfig.quality_evaluator)
// for `backbone`, which outlives it. Called once per campaign per process.
using EvaluatorFactory = std::function<absl::StatusOr<std::unique_ptr<TrialEvaluator>>(
    const CampaignConfig& config, const Backbone& backbone)>;

// LoadBackbone(backbone_checkpoint, backbone_metrics).
BackboneLoader DefaultBackboneLoader();

// "in-process": short continued pretraining (TrainOptionsFromRecipe of the
// campaign's recipe and seed) on the campaign's tokens, split into training
// and held-out parts, on threads of the coordinator (one at a time unless
// the campaign sets max_in_flight). Any other name: what `definitions`
// gives it (the coordinator's --evaluator NAME=DEFINITION): "slurm:FILE"
// (a SlurmEvaluatorConfig, quality/slurm_evaluator.h) or a command template
// run on threads; FAILED_PRECONDITION for a name it does not hold (a
// campaign stored by another coordinator).
EvaluatorFactory DefaultEvaluatorFactory(std::map<std::string, std::string> definitions = {});

// Checks one --evaluator definition (a Slurm file that reads, or a template
// with {checkpoint} and {output}); errors name the evaluator.
absl::Status CheckEvaluatorDefinition(const std::string& name, const std::string& definition);

// The prefix of a Slurm definition: --evaluator gpu=slurm:configs/slurm-eval.textproto
inline constexpr char kSlurmPrefix[] = "slurm:";

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_EVALUATORS_H_
