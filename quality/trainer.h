// Continued pretraining in libtorch: AdamW with decoupled weight decay (none
// on norms), linear warm-up then cosine decay, global gradient-norm clipping,
// optional knowledge distillation from a frozen teacher (MobileLLM-Flash
// Sec. 4.1 trains its final candidates with KD from the backbone), held-out
// evaluation loss, checkpoints that a later run resumes from.
//
// Batches are windows at offsets drawn from a generator seeded with
// (seed, step), so a resumed run sees exactly the batches an uninterrupted
// one would have.
#ifndef HILNAS_QUALITY_TRAINER_H_
#define HILNAS_QUALITY_TRAINER_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/decoder.h"
#include "proto/campaign.pb.h"
#include "quality/tokens.h"

namespace hilnas {

struct TrainOptions {
  int64_t steps = 200;
  int64_t batch_size = 16;
  int64_t seq_len = 128;
  double lr = 3e-3;
  double min_lr_ratio = 0.1;  // cosine floor as a fraction of lr
  int64_t warmup_steps = 20;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95;
  double grad_clip = 1.0;  // global L2 norm; 0 = off
  // Loss = (1 - w) cross-entropy + w T^2 KL(teacher || student) with the
  // teacher's and student's softmax at temperature T. 0: no teacher needed.
  double distill_weight = 0;
  double distill_temperature = 1;
  int64_t eval_every = 0;     // steps between held-out evaluations; 0 = end only
  int64_t eval_windows = 64;  // held-out windows of seq_len, evenly spaced
  // The in-process evaluator's score: the held-out loss after storing the
  // trained matrices as this (Decoder::StoreWeightsAs); empty: as trained.
  std::string eval_weight_dtype;
  // ... and its KV cache stored as this (Decoder::SetKvDtype: f16, q8_0;
  // empty or f32: as computed).
  std::string eval_kv_dtype;
  // When set: a resumable checkpoint every `checkpoint_every` steps (and at
  // the end) under checkpoint_dir/resume; an existing one is resumed.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  uint64_t seed = 0;

  // INVALID_ARGUMENT naming the first bad field.
  absl::Status Validate() const;
};

// The training a recipe describes, as `hilnas train` and a campaign's
// in-process evaluator both run it: warm-up clamped to half the steps,
// weight decay and clipping from the recipe or TrainOptions' defaults.
// Fields a recipe does not have (evaluation cadence, distillation,
// resumable checkpoints) keep their defaults.
TrainOptions TrainOptionsFromRecipe(const TrainRecipe& recipe, uint64_t seed);

struct TrainProgress {
  int64_t step = 0, steps = 0;  // step just finished, 1-based
  double train_loss = 0;
  double lr = 0;
  double tokens_per_s = 0;
  double eval_loss = std::numeric_limits<double>::quiet_NaN();  // when evaluated
};

struct TrainResult {
  double initial_eval_loss = 0;  // before the first step (of this run)
  double final_eval_loss = 0;
  double final_train_loss = 0;
  int64_t tokens = 0;  // trained on in this run
  int64_t resumed_from_step = 0;
  double seconds = 0;
  std::vector<std::pair<int64_t, double>> eval_history;  // (step, held-out loss)
};

// Mean next-token cross-entropy in nats over held-out windows of seq_len + 1
// tokens, `windows` of them evenly spaced (fewer if the tokens run out).
absl::StatusOr<double> HeldOutLoss(Decoder& model, const std::vector<int32_t>& tokens,
                                   int64_t seq_len, int64_t windows);

// Trains `student` in place. `teacher` is needed when distill_weight > 0 and
// must share the vocabulary. Errors from libtorch come back as INTERNAL.
absl::StatusOr<TrainResult> Train(Decoder& student, Decoder* teacher, const TokenSplit& data,
                                  const TrainOptions& options,
                                  const std::function<void(const TrainProgress&)>& progress = {});

}  // namespace hilnas

#endif  // HILNAS_QUALITY_TRAINER_H_
