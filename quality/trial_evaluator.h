// Stage 2 with trials in flight: the campaign runner submits a trial's
// evaluation, polls it on later steps, and keeps several out at once
// (MobileLLM-Flash Sec. 3.4 trains every candidate of a batch; a cluster
// trains them side by side). A TrialEvaluator is where evaluations run:
//   - NewConcurrentEvaluator: a QualityEvaluator (in-process trainer or a
//     command) on threads of the coordinator; what runs dies with it;
//   - NewSlurmEvaluator (quality/slurm_evaluator.h): sbatch jobs, which
//     outlive the coordinator; it re-attaches by job id, or by job name when
//     it died between submission and recording the id.
// Handles are opaque strings the runner records in the trial (Trial.eval_job).
#ifndef HILNAS_QUALITY_TRIAL_EVALUATOR_H_
#define HILNAS_QUALITY_TRIAL_EVALUATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hilnas {

// One task metric of the trained candidate (quality/task_eval.h), as
// `hilnas eval --task --json` prints it.
struct TaskScoreValue {
  std::string task;    // the TaskConfig's name
  std::string metric;  // acc, acc_norm, exact_match
  double value = 0;
  double stderr_ = 0;
  int64_t n = 0;
};

struct QualityResult {
  double loss = 0;          // held-out next-token loss after training, nats
  double initial_loss = 0;  // before training; NaN when the evaluator does not say
  int64_t tokens = 0;       // trained on
  double seconds = 0;
  std::vector<TaskScoreValue> tasks;  // the tasks the evaluator was given, when any
};

class QualityEvaluator {
 public:
  virtual ~QualityEvaluator() = default;
  // Trains and scores the checkpoint in `checkpoint_dir`; may write under
  // `work_dir` (created if missing). Called from several threads at once
  // (NewConcurrentEvaluator): implementations keep no state between calls.
  virtual absl::StatusOr<QualityResult> Evaluate(const std::string& checkpoint_dir,
                                                 const std::string& work_dir) = 0;
};

// One attempt at evaluating one trial.
struct EvaluationTask {
  std::string campaign;
  int64_t trial = 0;
  int attempt = 1;
  std::string checkpoint_dir;  // the pruned candidate (Hugging Face layout)
  std::string work_dir;        // this attempt's output, logs, training state
  // hilnas-{campaign}-{trial}-{attempt}: the cluster job's name.
  std::string JobName() const;
};

struct EvaluationStatus {
  enum class Kind {
    kQueued,  // waiting for resources
    kRunning,
    kDone,    // `result` holds the loss
    kRetry,   // ended in a way worth another attempt (node failure, preemption, ...)
    kFailed,  // ended in a way another attempt would repeat (time limit, bad output)
    kLost,    // the handle means nothing to this evaluator (it did not survive a restart)
  };
  Kind kind = Kind::kQueued;
  std::string state;    // the evaluator's word for it: PENDING, RUNNING, TIMEOUT, ...
  std::string node;     // where it runs or ran, when known
  std::string message;  // kRetry, kFailed: the state and the tail of the job's log
  QualityResult result;
};

class TrialEvaluator {
 public:
  virtual ~TrialEvaluator() = default;
  // Where trial checkpoints go (a folder every worker sees); empty: the
  // runner's own work folder.
  virtual std::string work_root() const { return ""; }
  // At most this many attempts per trial for kRetry ends.
  virtual int max_attempts() const { return 1; }
  // At most this many evaluations at once (the runner also caps it by the
  // campaign's max_in_flight); 0: no limit of its own.
  virtual int capacity() const { return 0; }

  // Starts `task` and returns its handle.
  virtual absl::StatusOr<std::string> Submit(const EvaluationTask& task) = 0;
  // The handle of an evaluation submitted for `task` whose handle was never
  // recorded (the coordinator died in between); empty when there is none.
  virtual absl::StatusOr<std::string> Find(const EvaluationTask& task) = 0;
  // Where `handle` stands. May answer from a recent look (back-off).
  virtual absl::StatusOr<EvaluationStatus> Poll(const EvaluationTask& task,
                                                const std::string& handle) = 0;
  // Stops it; OK when it already ended.
  virtual absl::Status Cancel(const std::string& handle) = 0;
};

// Runs `evaluator` on up to `capacity` threads (0: no limit). Handles are
// "local-N"; those of an earlier process are kLost, and Find never finds.
// The destructor waits for running evaluations (a cancelled one's result is
// dropped).
std::unique_ptr<TrialEvaluator> NewConcurrentEvaluator(std::shared_ptr<QualityEvaluator> evaluator,
                                                       int capacity);

// Reads the JSON object an external evaluation wrote to `path`:
// {"loss": 2.31, "initial_loss": 3.1, "tokens": 1000000, "seconds": 95,
//  "tasks": [{"task": "piqa", "metric": "acc", "value": 0.61, "stderr": 0.01,
//             "n": 1838}, ...]}
// ("loss" required and finite; "tasks" optional, each entry with a task and
// metric name and a finite value in [0, 1]). Errors name the file and entry.
absl::StatusOr<QualityResult> ReadQualityJson(const std::string& path);

}  // namespace hilnas

#endif  // HILNAS_QUALITY_TRIAL_EVALUATOR_H_
