#include "quality/kvp_trainer.h"

#include <torch/torch.h>

#include <chrono>

#include "absl/strings/str_cat.h"
#include "quality/train_util.h"
#include "util/status_macros.h"

namespace hilnas {

absl::StatusOr<double> KvpHeldOutLoss(KvPredictor& kvp, const std::vector<int32_t>& tokens,
                                      int64_t seq_len, int64_t windows) {
  const std::vector<int64_t> offsets =
      HeldOutOffsets(static_cast<int64_t>(tokens.size()), seq_len, windows);
  if (offsets.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokens.size(), " held-out tokens do not fill one window of ", seq_len + 1));
  }
  try {
    torch::NoGradGuard no_grad;
    double sum = 0;
    const int64_t vocab = kvp.base().arch().vocab_size;
    for (size_t i = 0; i < offsets.size(); i += 16) {
      std::vector<int64_t> part(offsets.begin() + i,
                                offsets.begin() + std::min(offsets.size(), i + 16));
      auto w = Windows(tokens, part, seq_len + 1);
      auto logits = kvp.Forward(w.narrow(1, 0, seq_len)).base_logits;
      sum += torch::nn::functional::cross_entropy(logits.reshape({-1, vocab}),
                                                  w.narrow(1, 1, seq_len).reshape({-1}))
                 .item<double>() *
             part.size();
    }
    return sum / offsets.size();
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("KVP held-out loss: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<TrainResult> TrainKvp(KvPredictor& kvp, const TokenSplit& data,
                                     const TrainOptions& o, KvpLossWeights weights,
                                     const std::function<void(const TrainProgress&)>& progress) {
  HILNAS_RETURN_IF_ERROR(o.Validate());
  if (static_cast<int64_t>(data.train.size()) < o.seq_len + 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(data.train.size(), " training tokens do not fill one window"));
  }
  TrainResult r;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (auto& [name, t] : kvp.base().NamedTensors()) t.set_requires_grad(false);  // frozen
    torch::optim::AdamW opt = MakeAdamW(kvp.TrainableParameters(), o);
    HILNAS_ASSIGN_OR_RETURN(r.initial_eval_loss,
                            KvpHeldOutLoss(kvp, data.heldout, o.seq_len, o.eval_windows));
    for (int64_t step = 1; step <= o.steps; ++step) {
      const double lr = LearningRate(o, step);
      SetLearningRate(opt, lr);
      const auto s0 = std::chrono::steady_clock::now();
      opt.zero_grad();
      torch::Tensor loss =
          kvp.Loss(TrainBatch(data.train, o, step), weights.consistency, weights.auxiliary);
      HILNAS_ASSIGN_OR_RETURN(TrainProgress p,
                              ApplyStep(loss, kvp.TrainableParameters(), opt, o, step, lr, s0, r));
      if (EvaluatesAt(o, step)) {
        HILNAS_ASSIGN_OR_RETURN(p.eval_loss,
                                KvpHeldOutLoss(kvp, data.heldout, o.seq_len, o.eval_windows));
        r.eval_history.push_back({step, p.eval_loss});
        r.final_eval_loss = p.eval_loss;
      }
      if (progress) progress(p);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("KVP training: ", e.what_without_backtrace()));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace hilnas
