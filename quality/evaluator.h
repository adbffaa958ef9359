// How good a candidate is (MobileLLM-Flash Sec. 3.3 Key Insight-2: a short
// continued pretraining from inherited weights ranks candidates correctly).
// The coordinator asks a QualityEvaluator for the loss of a pruned
// checkpoint; the default trains in process, the external one hands the
// checkpoint to the user's own command (a GPU cluster, Slurm's srun, ...).
#ifndef HILNAS_QUALITY_EVALUATOR_H_
#define HILNAS_QUALITY_EVALUATOR_H_

#include <memory>
#include <string>

#include <vector>

#include "absl/status/statusor.h"
#include "quality/tasks.h"
#include "quality/tokens.h"
#include "quality/trainer.h"
#include "quality/trial_evaluator.h"

namespace hilnas {

// Trains a copy of the checkpoint on `data` with `options` (a resumable
// checkpoint under work_dir/train) and reports its held-out loss. With
// distill_weight > 0 the teacher is loaded from `teacher_dir`. Each of
// `tasks` is then scored on the trained model at the deployment precision
// (options.eval_weight_dtype, eval_kv_dtype) with the checkpoint's own
// tokenizer (quality/task_eval.h) into QualityResult.tasks; a KV-prediction
// candidate is refused when tasks are asked for.
std::unique_ptr<QualityEvaluator> NewInProcessEvaluator(
    std::shared_ptr<const TokenSplit> data, TrainOptions options, std::string teacher_dir = "",
    std::shared_ptr<const std::vector<Task>> tasks = nullptr);

// The command line flags that make `hilnas train` score `task_configs`
// after training, at the deployment precision, into its --result-json
// (" --task A --task B --task-weight-dtype q4_0 ..."; empty without
// tasks): an external evaluator's {task_flags}. INVALID_ARGUMENT for a path
// with characters other than letters, digits and / . _ - (it goes into a
// shell command).
absl::StatusOr<std::string> TaskFlags(const std::vector<std::string>& task_configs,
                                      int task_limit, const std::string& weight_dtype,
                                      const std::string& kv_dtype);

// Runs `command_template` with {checkpoint}, {output} (work_dir/
// quality.json) and {task_flags} (TaskFlags) substituted, under a timeout,
// then reads the JSON object the command wrote there: {"loss": 2.31,
// "tokens": 1000000, "seconds": 95, "tasks": [...]} (ReadQualityJson).
// Errors name the command and the file.
std::unique_ptr<QualityEvaluator> NewExternalCommandEvaluator(std::string command_template,
                                                              double timeout_s,
                                                              std::string task_flags = "");

}  // namespace hilnas

#endif  // HILNAS_QUALITY_EVALUATOR_H_
