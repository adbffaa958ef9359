#include "coordinator/evaluators.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "quality/slurm_evaluator.h"
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

absl::Status CheckEvaluatorDefinition(const std::string& name, const std::string& definition) {
  if (absl::StartsWith(definition, kSlurmPrefix)) {
    absl::StatusOr<SlurmEvaluatorConfig> c =
        ReadSlurmEvaluatorConfig(definition.substr(sizeof(kSlurmPrefix) - 1));
    if (!c.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--evaluator ", name, ": ", c.status().message()));
    }
    return absl::OkStatus();
  }
  if (definition.find("{checkpoint}") == std::string::npos ||
      definition.find("{output}") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--evaluator ", name, ": the template needs {checkpoint} and {output} (or slurm:FILE)"));
  }
  return absl::OkStatus();
}

EvaluatorFactory DefaultEvaluatorFactory(std::map<std::string, std::string> definitions) {
  return [definitions = std::move(definitions)](
             const CampaignConfig& c,
             const Backbone& backbone) -> absl::StatusOr<std::unique_ptr<TrialEvaluator>> {
    const std::vector<std::string> task_configs(c.tasks().begin(), c.tasks().end());
    if (c.quality_evaluator() != "in-process") {
      HILNAS_ASSIGN_OR_RETURN(const std::string task_flags,
                              TaskFlags(task_configs, c.task_limit(),
                                        c.train().eval_weight_dtype(), c.train().eval_kv_dtype()));
      auto it = definitions.find(c.quality_evaluator());
      if (it == definitions.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("quality_evaluator \"", c.quality_evaluator(),
                         "\" is not defined on this coordinator's command line "
                         "(--evaluator NAME=TEMPLATE or NAME=slurm:FILE)"));
      }
      if (absl::StartsWith(it->second, kSlurmPrefix)) {
        HILNAS_ASSIGN_OR_RETURN(
            SlurmEvaluatorConfig slurm,
            ReadSlurmEvaluatorConfig(it->second.substr(sizeof(kSlurmPrefix) - 1)));
        return NewSlurmEvaluator(std::move(slurm), task_flags);
      }
      return NewConcurrentEvaluator(
          NewExternalCommandEvaluator(it->second, c.quality_timeout_s(), task_flags),
          /*capacity=*/0);
    }
    HILNAS_ASSIGN_OR_RETURN(std::vector<int32_t> ids,
                            ReadTokenFile(c.tokens(), backbone.model->arch().vocab_size));
    HILNAS_ASSIGN_OR_RETURN(
        TokenSplit split,
        SplitTokens(std::move(ids), c.train().heldout_fraction(), c.train().seq_len() + 1));
    auto tasks = std::make_shared<std::vector<Task>>();
    for (const std::string& path : task_configs) {
      HILNAS_ASSIGN_OR_RETURN(Task t, LoadTask(path, c.task_limit()));
      tasks->push_back(std::move(t));
    }
    // Training already uses every core: one at a time unless asked.
    return NewConcurrentEvaluator(
        NewInProcessEvaluator(std::make_shared<const TokenSplit>(std::move(split)),
                              TrainOptionsFromRecipe(c.train(), c.seed()), /*teacher_dir=*/"",
                              std::move(tasks)),
        /*capacity=*/c.max_in_flight() > 0 ? c.max_in_flight() : 1);
  };
}

}  // namespace hilnas
