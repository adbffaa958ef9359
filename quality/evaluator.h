// How good a candidate is (MobileLLM-Flash Sec. 3.3 Key Insight-2: a short
// continued pretraining from inherited weights ranks candidates correctly).
// The coordinator asks a QualityEvaluator for the loss of a pruned
// checkpoint; the default trains in process, the external one hands the
// checkpoint to the user's own command (a GPU cluster, Slurm's srun, ...).
#ifndef HILNAS_QUALITY_EVALUATOR_H_
#define HILNAS_QUALITY_EVALUATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "quality/tokens.h"
#include "quality/trainer.h"
#include "quality/trial_evaluator.h"

namespace hilnas {

// Trains a copy of the checkpoint on `data` with `options` (a resumable
// checkpoint under work_dir/train) and reports its held-out loss. With
// distill_weight > 0 the teacher is loaded from `teacher_dir`.
std::unique_ptr<QualityEvaluator> NewInProcessEvaluator(std::shared_ptr<const TokenSplit> data,
                                                        TrainOptions options,
                                                        std::string teacher_dir = "");

// Runs `command_template` with {checkpoint} and {output} (work_dir/
// quality.json) substituted, under a timeout, then reads the JSON object the
// command wrote there: {"loss": 2.31, "tokens": 1000000, "seconds": 95}
// ("loss" required and finite). Errors name the command and the file.
std::unique_ptr<QualityEvaluator> NewExternalCommandEvaluator(std::string command_template,
                                                              double timeout_s);

}  // namespace hilnas

#endif  // HILNAS_QUALITY_EVALUATOR_H_
