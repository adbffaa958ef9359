#include "quality/evaluator.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "model/kv_prediction.h"
#include "nlohmann/json.hpp"
#include "quality/kvp_trainer.h"
#include "quality/task_eval.h"
#include "tokenizer/tokenizer.h"
#include "quality/trial_evaluator.h"
#include "util/status_macros.h"
#include "util/subprocess.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;

class InProcessEvaluator : public QualityEvaluator {
 public:
  InProcessEvaluator(std::shared_ptr<const TokenSplit> data, TrainOptions options,
                     std::string teacher_dir, std::shared_ptr<const std::vector<Task>> tasks)
      : data_(std::move(data)),
        options_(std::move(options)),
        teacher_dir_(std::move(teacher_dir)),
        tasks_(std::move(tasks)) {}

  absl::StatusOr<QualityResult> Evaluate(const std::string& checkpoint_dir,
                                         const std::string& work_dir) override {
    HILNAS_ASSIGN_OR_RETURN(auto checkpoint, CheckpointReader::Open(checkpoint_dir));
    if (checkpoint->arch().kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
      if (tasks_ != nullptr && !tasks_->empty()) {
        return absl::UnimplementedError(absl::StrCat(
            checkpoint_dir, ": task scores of a KV-prediction candidate are not computed yet "
                            "(its auxiliary model fills the cache); drop `tasks` or KV prediction"));
      }
      return EvaluateKvp(checkpoint_dir);
    }
    HILNAS_ASSIGN_OR_RETURN(Decoder model, checkpoint->Load());
    std::unique_ptr<Decoder> teacher;
    if (options_.distill_weight > 0) {
      if (teacher_dir_.empty()) {
        return absl::InvalidArgumentError("in-process evaluator: distillation needs a teacher");
      }
      HILNAS_ASSIGN_OR_RETURN(Decoder t, LoadCheckpoint(teacher_dir_));
      teacher = std::make_unique<Decoder>(std::move(t));
    }
    TrainOptions o = options_;
    if (!work_dir.empty()) o.checkpoint_dir = (fs::path(work_dir) / "train").string();
    HILNAS_ASSIGN_OR_RETURN(TrainResult r, Train(model, teacher.get(), *data_, o));
    QualityResult q;
    q.loss = r.final_eval_loss;
    const bool weights = !o.eval_weight_dtype.empty() && o.eval_weight_dtype != "f32";
    const bool cache = !o.eval_kv_dtype.empty() && o.eval_kv_dtype != "f32";
    if (weights || cache) {
      // Scored as it ships: the trained matrices and the KV cache stored at
      // deployment precision (the checkpoints under work_dir keep the
      // trained weights).
      if (weights) HILNAS_RETURN_IF_ERROR(model.StoreWeightsAs(o.eval_weight_dtype));
      if (cache) HILNAS_RETURN_IF_ERROR(model.SetKvDtype(o.eval_kv_dtype));
      HILNAS_ASSIGN_OR_RETURN(q.loss,
                              HeldOutLoss(model, data_->heldout, o.seq_len, o.eval_windows));
    }
    q.initial_loss =
        r.resumed_from_step > 0 ? std::numeric_limits<double>::quiet_NaN() : r.initial_eval_loss;
    q.tokens = o.steps * o.batch_size * o.seq_len;
    q.seconds = r.seconds;
    if (tasks_ != nullptr && !tasks_->empty()) {
      HILNAS_ASSIGN_OR_RETURN(q.tasks, ScoreTasks(model, checkpoint_dir));
    }
    return q;
  }

 private:
  // A KV-prediction candidate trains its auxiliary model and predictor with
  // the base frozen and is scored by the base's loss over the predicted
  // cache (quality/kvp_trainer.h); no resume or distillation yet.
  absl::StatusOr<QualityResult> EvaluateKvp(const std::string& checkpoint_dir) {
    HILNAS_ASSIGN_OR_RETURN(KvPredictor kvp, LoadKvpCheckpoint(checkpoint_dir));
    HILNAS_ASSIGN_OR_RETURN(TrainResult r, TrainKvp(kvp, *data_, options_));
    QualityResult q;
    q.loss = r.final_eval_loss;
    q.initial_loss = r.initial_eval_loss;
    q.tokens = r.tokens;
    q.seconds = r.seconds;
    return q;
  }

  // The trained model on each task, as `hilnas eval --task` scores it.
  absl::StatusOr<std::vector<TaskScoreValue>> ScoreTasks(Decoder& model,
                                                         const std::string& checkpoint_dir) {
    HILNAS_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::FromDir(checkpoint_dir));
    std::vector<TaskScoreValue> out;
    for (const Task& task : *tasks_) {
      HILNAS_ASSIGN_OR_RETURN(TaskResult r, EvaluateTask(model, tok, task, TaskEvalOptions()));
      for (const TaskMetric& m : r.metrics) {
        out.push_back({r.task, m.name, m.value, m.stderr_, r.n});
      }
    }
    return out;
  }

  std::shared_ptr<const TokenSplit> data_;
  TrainOptions options_;
  std::string teacher_dir_;
  std::shared_ptr<const std::vector<Task>> tasks_;
};

class ExternalCommandEvaluator : public QualityEvaluator {
 public:
  ExternalCommandEvaluator(std::string tmpl, double timeout_s, std::string task_flags)
      : template_(std::move(tmpl)), timeout_s_(timeout_s), task_flags_(std::move(task_flags)) {}

  absl::StatusOr<QualityResult> Evaluate(const std::string& checkpoint_dir,
                                         const std::string& work_dir) override {
    std::error_code ec;
    fs::create_directories(work_dir, ec);
    const std::string output = (fs::path(work_dir) / "quality.json").string();
    fs::remove(output, ec);  // a stale result must not pass for this one
    HILNAS_ASSIGN_OR_RETURN(
        std::string cmd,
        ExpandCommand(template_, {{"checkpoint", checkpoint_dir},
                                  {"output", output},
                                  {"task_flags", task_flags_}}));
    HILNAS_RETURN_IF_ERROR(RunShellCommand(cmd, timeout_s_).status());
    if (!fs::exists(output)) {
      return absl::NotFoundError(
          absl::StrCat("quality command \"", cmd, "\" exited 0 but wrote no ", output));
    }
    return ReadQualityJson(output);
  }

 private:
  std::string template_;
  double timeout_s_;
  std::string task_flags_;
};

}  // namespace

std::unique_ptr<QualityEvaluator> NewInProcessEvaluator(
    std::shared_ptr<const TokenSplit> data, TrainOptions options, std::string teacher_dir,
    std::shared_ptr<const std::vector<Task>> tasks) {
  return std::make_unique<InProcessEvaluator>(std::move(data), std::move(options),
                                              std::move(teacher_dir), std::move(tasks));
}

std::unique_ptr<QualityEvaluator> NewExternalCommandEvaluator(std::string command_template,
                                                              double timeout_s,
                                                              std::string task_flags) {
  return std::make_unique<ExternalCommandEvaluator>(std::move(command_template), timeout_s,
                                                    std::move(task_flags));
}

absl::StatusOr<std::string> TaskFlags(const std::vector<std::string>& task_configs,
                                      int task_limit, const std::string& weight_dtype,
                                      const std::string& kv_dtype) {
  if (task_configs.empty()) return std::string();
  std::string flags;
  for (const std::string& path : task_configs) {
    if (path.empty() || path.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                               "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-") !=
                            std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("task config \"", path,
                       "\": a path passed to an evaluator's command may hold only letters, "
                       "digits and / . _ -"));
    }
    absl::StrAppend(&flags, " --task ", path);
  }
  if (task_limit > 0) absl::StrAppend(&flags, " --task-limit ", task_limit);
  for (const auto& [flag, dtype] : {std::pair<const char*, std::string>{"--task-weight-dtype", weight_dtype},
                                    {"--task-kv-dtype", kv_dtype}}) {
    if (dtype.empty() || dtype == "f32") continue;
    if (dtype.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " \"", dtype, "\" is not a dtype"));
    }
    absl::StrAppend(&flags, " ", flag, " ", dtype);
  }
  return flags;
}

}  // namespace hilnas
