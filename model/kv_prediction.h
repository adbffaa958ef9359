// KV Prediction (Horton et al., `kv-prediction.txt` Sec. 4): a small
// auxiliary model processes the prompt, learned linear maps predict the base
// model's KV cache from the auxiliary model's, and the base model generates
// from the predicted cache. Time to first token costs roughly the auxiliary
// prefill (Sec. 4.4).
//
// KvPredictor owns the base (frozen in training), the auxiliary model and
// the predictor: per base attention layer one linear map with bias for K
// and one for V, from the mapped auxiliary layer's KV width to the base's
// (layer map: KvPredictionLayerMap, Tab. 1). Keys are predicted before the
// base's K-norm and RoPE.
//
// Not thread-safe.
#ifndef HILNAS_MODEL_KV_PREDICTION_H_
#define HILNAS_MODEL_KV_PREDICTION_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/decoder.h"
#include "model/generate.h"

namespace hilnas {

struct KvPredictorImpl;

class KvPredictor {
 public:
  // `base` must have a kv_prediction in its arch. The auxiliary model is
  // the base's retained layers for KVP-LP (weights copied, App. A) and
  // `aux` when given (KVP-C, e.g. pruned from the base), else random from
  // `seed`. Maps start as the identity where the widths agree, zero
  // otherwise (so a copied auxiliary layer predicts its own K/V exactly).
  static absl::StatusOr<KvPredictor> Create(std::shared_ptr<Decoder> base, uint64_t seed,
                                            std::shared_ptr<Decoder> aux = nullptr);

  const Decoder& base() const;
  Decoder& auxiliary();
  std::vector<int> layer_map() const;  // aux layer feeding each base layer

  // Training forward over tokens [B, T]: the auxiliary model's logits, the
  // base's logits with its queries attending only to the predicted K/V, and
  // the mean L1 between predicted and true base K/V (the consistency loss,
  // Sec. 4.2 Eq. 1). The base gets no gradient.
  struct Outputs {
    torch::Tensor base_logits, aux_logits, consistency;
  };
  Outputs Forward(const torch::Tensor& tokens);

  // Loss = CE(base) + aux_weight * CE(aux) + consistency_weight *
  // consistency (Eq. 2; the paper's lambda_C = 1 / n_B layers, Tab. 2, when
  // consistency_weight < 0).
  torch::Tensor Loss(const torch::Tensor& tokens, double consistency_weight = -1,
                     double aux_weight = 1);

  // Parameters that train: the auxiliary model's and the maps'.
  std::vector<torch::Tensor> TrainableParameters();
  // The maps as named tensors ("kv_predictor.layers.3.k.weight", ...).
  std::vector<std::pair<std::string, torch::Tensor>> PredictorTensors() const;

  // Inference (Sec. 4.3): auxiliary forward over the prompt but its last
  // token, predicted K/V into the base's cache, one base step on the last
  // prompt token (the first generated token), then plain base decoding.
  // Timed like GreedyGenerate: TTFT = auxiliary prefill + predictor + base step.
  absl::StatusOr<Generation> Generate(const std::vector<int64_t>& prompt,
                                      const GenerateOptions& options);

 private:
  explicit KvPredictor(std::shared_ptr<KvPredictorImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<KvPredictorImpl> impl_;
};

// A KV-prediction checkpoint is a folder: the base as a plain checkpoint
// (config.json, whose "kv_prediction" field names the auxiliary, and
// model.safetensors: any Llama tool loads the base), auxiliary/ (the
// auxiliary model as a plain checkpoint) and kv_predictor.safetensors (the
// maps, "kv_predictor.layers.L.k.weight" ...).
absl::Status SaveKvpCheckpoint(KvPredictor& kvp, const std::string& dir, StorageDtype dtype);
// DATA_LOSS naming the file for a missing or misshapen part.
absl::StatusOr<KvPredictor> LoadKvpCheckpoint(const std::string& dir,
                                              torch::Dtype dtype = torch::kFloat);

}  // namespace hilnas

#endif  // HILNAS_MODEL_KV_PREDICTION_H_
