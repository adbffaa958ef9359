// `hilnas train`, also the training step of `hilnas backbone`.
#ifndef HILNAS_TOOLS_COMMANDS_TRAIN_H_
#define HILNAS_TOOLS_COMMANDS_TRAIN_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "quality/trainer.h"
#include "tools/common.h"

namespace hilnas::tools {

struct TrainCommandOptions {
  std::string tokens;
  std::string ckpt;  // continued pretraining; else a fresh --shape/--arch
  ArchFlags model;
  std::string out;
  bool overwrite = false;
  int64_t steps = 200;
  int64_t batch_size = 16;
  int64_t seq_len = 128;
  double lr = 3e-3;
  int64_t warmup_steps = 20;
  double weight_decay = 0.1;
  double grad_clip = 1.0;
  double heldout = 0.05;
  std::string distill_from;
  double distill_weight = 0.5;
  int64_t eval_every = 50;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 100;
  std::string result_json;
  // Scored on the trained checkpoint, at this precision, into result_json
  // (what a campaign's tasks ask of an external or Slurm evaluator).
  std::vector<std::string> tasks;
  int64_t task_limit = 0;
  std::string task_weight_dtype = "f32";
  std::string task_kv_dtype = "f32";
  double kvp_consistency_weight = -1;
  double kvp_aux_weight = 1;
  std::string dtype = "f32";
  int32_t threads = 0;
  uint64_t seed = 0;
};

// Trains as `o` says and saves the checkpoint (and train.json) into `out`
// (o.out is not read), printing progress.
absl::StatusOr<TrainResult> TrainInto(const TrainCommandOptions& o, const std::string& out);

}  // namespace hilnas::tools

#endif  // HILNAS_TOOLS_COMMANDS_TRAIN_H_
