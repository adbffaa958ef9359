// Downstream tasks as data (proto/task.proto): a JSONL file and a small
// config that turn each document into lm-evaluation-harness's requests, so
// a candidate is scored as the published tables score models
// (MobileLLM-Flash Sec. 4.2, Tab. 6: HellaSwag, BoolQ, PIQA, SIQA,
// WinoGrande, ARC-Easy zero-shot; TriviaQA, NQ 5-shot; ARC-Challenge
// 25-shot).
//
// This half is libtorch-free: reading, templates, few-shot prompts (Python's
// random.Random(seed).sample, as the harness draws them), exact-match
// normalisation and the metrics' standard errors. task_eval.h runs a model.
#ifndef HILNAS_QUALITY_TASKS_H_
#define HILNAS_QUALITY_TASKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/task.pb.h"

namespace hilnas {

// One document's requests.
struct TaskItem {
  int64_t line = 0;  // 1-based line of the document in the data file
  // Multiple choice: request i scores continuations[i] after contexts[i]
  // (one context per choice: shared, or WinoGrande's one per choice).
  std::vector<std::string> contexts;
  std::vector<std::string> continuations;
  std::vector<std::string> choice_texts;  // what acc_norm divides by the length of
  int gold = -1;
  // Generation: the prompt is contexts[0]; any answer matches.
  std::vector<std::string> answers;
};

struct Task {
  TaskConfig config;
  std::string config_path;
  std::string data_path;
  std::vector<TaskItem> items;
};

// Reads the config and its data and builds every document's requests (the
// first `limit` documents when limit > 0). Errors name the file, the line
// and the field: a missing data file (and where it is expected), a missing
// or out-of-range gold, empty choices, a template field the document lacks.
absl::StatusOr<Task> LoadTask(const std::string& config_path, int64_t limit = 0);

// The data files a task config names (data, and fewshot_data when set),
// resolved as LoadTask resolves them (relative to the config's folder),
// without opening them: what a caller checks before LoadTask reads them.
absl::StatusOr<std::vector<std::string>> TaskDataPaths(const std::string& config_path);

// Renders a template against one JSON document (the text of a JSONL line).
// Exposed for tests.
absl::StatusOr<std::string> RenderTemplate(const std::string& tmpl, const std::string& doc_json);

// The harness's exact_match: regexes_to_ignore removed, then case and ASCII
// punctuation folded as the config says; true when any answer equals the
// prediction.
bool ExactMatch(const TaskConfig& config, const std::string& prediction,
                const std::vector<std::string>& answers);
// The generation as scored: cut at the first stop sequence; leading
// whitespace removed (the harness's remove_whitespace filter).
std::string CutAtStop(const TaskConfig& config, const std::string& text);

// The harness's standard error of a mean: sample standard deviation
// (n - 1) over sqrt(n); 0 for fewer than two values.
double MeanStderr(const std::vector<double>& values);

}  // namespace hilnas

#endif  // HILNAS_QUALITY_TASKS_H_
