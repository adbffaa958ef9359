// What the trainers share (quality/trainer.cc, quality/kvp_trainer.cc):
// batches as a pure function of (seed, step), so a resumed run sees the
// batches an uninterrupted one would, the warm-up + cosine schedule, and the
// evenly spaced held-out windows.
#ifndef HILNAS_QUALITY_TRAIN_UTIL_H_
#define HILNAS_QUALITY_TRAIN_UTIL_H_

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "quality/trainer.h"

namespace hilnas {

// [count, len] windows of `tokens` starting at `offsets`.
torch::Tensor Windows(const std::vector<int32_t>& tokens, const std::vector<int64_t>& offsets,
                      int64_t len);
// The batch of step `step` (1-based): [batch_size, seq_len + 1] tokens.
torch::Tensor TrainBatch(const std::vector<int32_t>& train, const TrainOptions& o, int64_t step);
// Linear warm-up to lr, then cosine to lr * min_lr_ratio at the last step.
double LearningRate(const TrainOptions& o, int64_t step);
// Offsets of `windows` evenly spaced held-out windows of seq_len + 1 tokens
// (fewer when the tokens run out).
std::vector<int64_t> HeldOutOffsets(int64_t tokens, int64_t seq_len, int64_t windows);

// AdamW with decoupled weight decay on matrices and none on vectors (norm
// scales, biases); marks every tensor as requiring gradients.
torch::optim::AdamW MakeAdamW(const std::vector<torch::Tensor>& params, const TrainOptions& o);
void SetLearningRate(torch::optim::AdamW& opt, double lr);
// The end of one optimiser step: backward through `loss`, the gradient-norm
// clip over `params` (when o.grad_clip > 0), the optimiser step; then the
// step's loss (INTERNAL "training diverged" unless finite) and tokens recorded
// in `r`, and its progress record returned.
absl::StatusOr<TrainProgress> ApplyStep(torch::Tensor& loss,
                                        const std::vector<torch::Tensor>& params,
                                        torch::optim::Optimizer& opt, const TrainOptions& o,
                                        int64_t step, double lr,
                                        std::chrono::steady_clock::time_point started,
                                        TrainResult& r);
// Whether `step` evaluates on held-out data: every eval_every, and the last.
bool EvaluatesAt(const TrainOptions& o, int64_t step);

}  // namespace hilnas

#endif  // HILNAS_QUALITY_TRAIN_UTIL_H_
