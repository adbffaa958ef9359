// Training a KV-prediction candidate (KV Prediction Sec. 4.2): the base
// model is frozen; the auxiliary model and the predictor train on
// CE(base over the predicted cache) + CE(auxiliary) + lambda_C * L1(predicted,
// true K/V), lambda_C = 1 / n_B (Tab. 2) unless set. Same batches, schedule
// and clipping as Train (quality/trainer.h); no resume or distillation yet.
#ifndef HILNAS_QUALITY_KVP_TRAINER_H_
#define HILNAS_QUALITY_KVP_TRAINER_H_

#include <functional>

#include "absl/status/statusor.h"
#include "model/kv_prediction.h"
#include "quality/tokens.h"
#include "quality/trainer.h"

namespace hilnas {

// Mean next-token cross-entropy of the base generating from the predicted
// cache (queries attend to predicted K/V only) over held-out windows: the
// quality a KVP candidate is ranked by.
absl::StatusOr<double> KvpHeldOutLoss(KvPredictor& kvp, const std::vector<int32_t>& tokens,
                                      int64_t seq_len, int64_t windows);

// The loss weights of KV Prediction Eq. 2 beside the base's cross-entropy.
struct KvpLossWeights {
  double consistency = -1;  // lambda_C; < 0 takes 1 / n_B (Tab. 2)
  double auxiliary = 1;     // the auxiliary model's own cross-entropy
};

// Trains `kvp` in place; TrainResult's losses are KvpHeldOutLoss.
absl::StatusOr<TrainResult> TrainKvp(
    KvPredictor& kvp, const TokenSplit& data, const TrainOptions& options,
    KvpLossWeights weights = {}, const std::function<void(const TrainProgress&)>& progress = {});

}  // namespace hilnas

#endif  // HILNAS_QUALITY_KVP_TRAINER_H_
