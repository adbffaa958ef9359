// Task scoring as `hilnas eval --task` does it, shared with `hilnas train
// --task` (what an external or Slurm evaluator runs) and `hilnas pareto
// report`.
#ifndef HILNAS_TOOLS_COMMANDS_EVAL_H_
#define HILNAS_TOOLS_COMMANDS_EVAL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "quality/tasks.h"

namespace hilnas::tools {

struct TaskScoring {
  std::string ckpt;
  int64_t limit = 0;  // documents per task; 0: all
  bool add_bos = false;
  int64_t max_length = 2048;
  std::string weight_dtype = "f32";  // the deployment precision
  std::string kv_dtype = "f32";
  int32_t threads = 0;
};

// Every config and its data, first N documents each (0: all).
absl::StatusOr<std::vector<Task>> LoadTasks(const std::vector<std::string>& paths, int64_t limit);

// Scores `ts.ckpt` on each task with progress on stderr; one row per task
// metric: {"task", "metric", "value", "stderr", "n", "num_fewshot",
// "seconds"} (what ReadQualityJson reads as "tasks"). With `samples`, every
// document's scores by task name.
absl::StatusOr<nlohmann::json> ScoreTasks(const TaskScoring& ts, const std::vector<Task>& tasks,
                                          nlohmann::json* samples = nullptr);

// The rows as a markdown table: task, metric, value, stderr, n.
std::string TaskScoreTable(const nlohmann::json& rows);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMANDS_EVAL_H_
