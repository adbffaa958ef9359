#include "quality/evaluator.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "model/kv_prediction.h"
#include "nlohmann/json.hpp"
#include "quality/kvp_trainer.h"
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
                     std::string teacher_dir)
      : data_(std::move(data)),
        options_(std::move(options)),
        teacher_dir_(std::move(teacher_dir)) {}

  absl::StatusOr<QualityResult> Evaluate(const std::string& checkpoint_dir,
                                         const std::string& work_dir) override {
    HILNAS_ASSIGN_OR_RETURN(auto checkpoint, CheckpointReader::Open(checkpoint_dir));
    if (checkpoint->arch().kv_prediction.kind != KvPredictionSpec::Kind::kNone)
      return EvaluateKvp(checkpoint_dir);
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

  std::shared_ptr<const TokenSplit> data_;
  TrainOptions options_;
  std::string teacher_dir_;
};

class ExternalCommandEvaluator : public QualityEvaluator {
 public:
  ExternalCommandEvaluator(std::string tmpl, double timeout_s)
      : template_(std::move(tmpl)), timeout_s_(timeout_s) {}

  absl::StatusOr<QualityResult> Evaluate(const std::string& checkpoint_dir,
                                         const std::string& work_dir) override {
    std::error_code ec;
    fs::create_directories(work_dir, ec);
    const std::string output = (fs::path(work_dir) / "quality.json").string();
    fs::remove(output, ec);  // a stale result must not pass for this one
    HILNAS_ASSIGN_OR_RETURN(
        std::string cmd,
        ExpandCommand(template_, {{"checkpoint", checkpoint_dir}, {"output", output}}));
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
};

}  // namespace

std::unique_ptr<QualityEvaluator> NewInProcessEvaluator(std::shared_ptr<const TokenSplit> data,
                                                        TrainOptions options,
                                                        std::string teacher_dir) {
  return std::make_unique<InProcessEvaluator>(std::move(data), std::move(options),
                                              std::move(teacher_dir));
}

std::unique_ptr<QualityEvaluator> NewExternalCommandEvaluator(std::string command_template,
                                                              double timeout_s) {
  return std::make_unique<ExternalCommandEvaluator>(std::move(command_template), timeout_s);
}

}  // namespace hilnas
