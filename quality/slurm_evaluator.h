// A Slurm cluster as stage 2's quality evaluator (DESIGN "Scale": an
// existing cluster engine, never a scheduler of ours). Each attempt at a
// trial is one batch job named hilnas-{campaign}-{trial}-{attempt}, whose
// script (from the coordinator's own configuration) trains the pruned
// checkpoint and writes {"loss": ...} to {output}. The job id is the handle;
// squeue and sacct say where it stands, polled with back-off.
//
// How a job's end is treated (docs/slurm.md):
//   COMPLETED                                   read {output}: the result
//   FAILED NODE_FAIL PREEMPTED BOOT_FAIL
//   CANCELLED (by someone else) REVOKED         retry, up to max_attempts
//   TIMEOUT OUT_OF_MEMORY DEADLINE              failed trial: another attempt
//                                               with the same limits ends the same
#ifndef HILNAS_QUALITY_SLURM_EVALUATOR_H_
#define HILNAS_QUALITY_SLURM_EVALUATOR_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/campaign.pb.h"
#include "quality/trial_evaluator.h"

namespace hilnas {

// Reads and checks a SlurmEvaluatorConfig text proto, filling defaults;
// errors name the file and the field.
absl::StatusOr<SlurmEvaluatorConfig> ReadSlurmEvaluatorConfig(const std::string& path);
absl::Status ValidateSlurmEvaluatorConfig(const SlurmEvaluatorConfig& config,
                                          const std::string& where);

// What the evaluator makes of a Slurm job state (the first word of squeue's
// %T or sacct's State: "CANCELLED by 0" is CANCELLED).
EvaluationStatus::Kind SlurmStateKind(const std::string& state);

// The job id in `sbatch --parsable`'s output ("4121" or "4121;cluster").
absl::StatusOr<std::string> ParseSbatchOutput(const std::string& out);

// sbatch's arguments for `task`, its script at `script_path`.
std::vector<std::string> SbatchArgs(const SlurmEvaluatorConfig& config, const EvaluationTask& task,
                                    const std::string& script_path);

// `task_flags` (quality/evaluator.h TaskFlags: " --task A ...", checked
// there) is what the script's {task_flags} becomes.
std::unique_ptr<TrialEvaluator> NewSlurmEvaluator(SlurmEvaluatorConfig config,
                                                  std::string task_flags = "");

}  // namespace hilnas

#endif  // HILNAS_QUALITY_SLURM_EVALUATOR_H_
