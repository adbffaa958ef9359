// Scores a model on a task (quality/tasks.h) with lm-evaluation-harness's
// semantics, so the numbers sit beside published tables (MobileLLM-Flash
// Sec. 4.2, Tab. 6):
//
// - Multiple choice: the log-likelihood of each continuation given its
//   context, tokenized as the harness's HFLM does (trailing spaces of the
//   context move to the continuation; the continuation's ids are those of
//   encode(context + continuation) after encode(context)). `acc` takes the
//   highest sum; `acc_norm` divides each by the length of the choice's text
//   in characters (the harness's `len(choice)`, bytes for ASCII data).
// - Generation: greedy decoding from the prompt until a stop sequence or
//   end of text, cut at the first stop, leading whitespace removed;
//   `exact_match` after the task's normalisation.
// - Standard errors: the harness's for a mean, sample sd / sqrt(n).
//
// Requests are sorted by length and run in padded batches on all cores.
#ifndef HILNAS_QUALITY_TASK_EVAL_H_
#define HILNAS_QUALITY_TASK_EVAL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/decoder.h"
#include "quality/tasks.h"
#include "tokenizer/tokenizer.h"

namespace hilnas {

struct TaskEvalOptions {
  // Prepend BOS to every context. The harness's default is off, except for
  // Gemma, which needs it.
  bool add_bos = false;
  int64_t max_length = 2048;              // context + continuation, truncated from the left
  int64_t max_batch_bytes = 512ll << 20;  // logits of one batch, float32
  std::function<void(int64_t done, int64_t total)> progress;
};

// Per document, what the harness logs with --log_samples.
struct TaskSample {
  int64_t line = 0;
  std::vector<double> loglikelihoods;  // multiple choice, one per choice
  int gold = -1;
  int pred = -1, pred_norm = -1;
  std::string generation;  // generation: the text as scored
  bool correct = false;
};

struct TaskMetric {
  std::string name;  // acc, acc_norm, exact_match
  double value = 0;
  double stderr_ = 0;
};

struct TaskResult {
  std::string task;
  int64_t n = 0;
  std::vector<TaskMetric> metrics;
  std::vector<TaskSample> samples;
  double seconds = 0;
};

absl::StatusOr<TaskResult> EvaluateTask(Decoder& model, const tokenizer::Tokenizer& tok,
                                        const Task& task, const TaskEvalOptions& options);

}  // namespace hilnas

#endif  // HILNAS_QUALITY_TASK_EVAL_H_
