#include "model/kv_prediction.h"

#include "absl/strings/str_cat.h"
#include "model/checkpoint_files.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

// Collects every attention layer's raw K/V during a forward.
class KvCollector : public ForwardObserver {
 public:
  explicit KvCollector(size_t layers) : kv(layers) {}
  void OnKeysValues(int layer, const torch::Tensor& k, const torch::Tensor& v) override {
    kv[layer] = {k, v};
  }
  std::vector<LayerKv> kv;
};

}  // namespace

struct KvPredictorImpl : torch::nn::Module {
  std::shared_ptr<Decoder> base, aux;
  std::vector<int> map;  // aux layer per base layer
  // Per base layer (undefined for skip layers): K and V maps.
  std::vector<torch::nn::Linear> k_maps, v_maps;

  // Predicted base K/V from the auxiliary model's.
  std::vector<LayerKv> Predict(const std::vector<LayerKv>& aux_kv) {
    const Arch& a = base->arch();
    std::vector<LayerKv> out(a.num_layers);
    for (int l = 0; l < a.num_layers; ++l) {
      if (a.attention[l] == Attention::kSkip) continue;
      const LayerKv& src = aux_kv[map[l]];
      const auto b = src.keys.size(0), t = src.keys.size(1);
      auto flat_k = src.keys.reshape({b, t, -1}), flat_v = src.values.reshape({b, t, -1});
      out[l].keys = k_maps[l]->forward(flat_k).view({b, t, a.num_kv_heads, a.head_dim});
      out[l].values = v_maps[l]->forward(flat_v).view({b, t, a.num_kv_heads, a.head_dim});
    }
    return out;
  }
};

absl::StatusOr<KvPredictor> KvPredictor::Create(std::shared_ptr<Decoder> base, uint64_t seed,
                                                std::shared_ptr<Decoder> aux) {
  const Arch& a = base->arch();
  HILNAS_ASSIGN_OR_RETURN(Arch aux_arch, AuxiliaryArch(a));
  HILNAS_ASSIGN_OR_RETURN(std::vector<int> map, KvPredictionLayerMap(a));
  auto impl = std::make_shared<KvPredictorImpl>();
  impl->base = base;
  impl->map = map;
  try {
    if (aux != nullptr) {
      if (aux->arch().num_layers != aux_arch.num_layers) {
        return absl::InvalidArgumentError(
            absl::StrCat("KV prediction: the auxiliary model has ", aux->arch().num_layers,
                         " layers; the architecture's auxiliary has ", aux_arch.num_layers));
      }
      impl->aux = aux;
    } else {
      HILNAS_ASSIGN_OR_RETURN(Decoder d, Decoder::Create(aux_arch, seed, base->dtype()));
      impl->aux = std::make_shared<Decoder>(std::move(d));
      if (a.kv_prediction.kind == KvPredictionSpec::Kind::kLayerPruned) {
        // KVP-LP: the auxiliary model is the base's retained layers (App. A).
        HILNAS_ASSIGN_OR_RETURN(
            std::vector<int> kept,
            LayerPrunedKeptLayers(a.num_layers, a.kv_prediction.layer_pruned_ratio));
        torch::NoGradGuard no_grad;
        std::map<std::string, torch::Tensor> from;
        for (auto& [name, t] : base->NamedTensors()) from[name] = t;
        for (auto& [name, t] : impl->aux->NamedTensors()) {
          std::string src = name;
          const std::string prefix = "model.layers.";
          if (name.rfind(prefix, 0) == 0) {
            const size_t dot = name.find('.', prefix.size());
            const int j = std::stoi(name.substr(prefix.size(), dot - prefix.size()));
            src = absl::StrCat(prefix, kept[j], name.substr(dot));
          }
          auto it = from.find(src);
          if (it != from.end() && it->second.sizes() == t.sizes()) t.copy_(it->second);
        }
      }
    }
    const Arch& x = impl->aux->arch();
    torch::NoGradGuard no_grad;
    impl->k_maps.resize(a.num_layers, torch::nn::Linear(nullptr));
    impl->v_maps.resize(a.num_layers, torch::nn::Linear(nullptr));
    for (int l = 0; l < a.num_layers; ++l) {
      if (a.attention[l] == Attention::kSkip) continue;
      if (x.attention[map[l]] == Attention::kSkip) {
        return absl::InvalidArgumentError(absl::StrCat("KV prediction: base layer ", l,
                                                       " maps to auxiliary layer ", map[l],
                                                       ", which has no attention"));
      }
      for (auto* maps : {&impl->k_maps, &impl->v_maps}) {
        torch::nn::Linear m(torch::nn::LinearOptions(x.kv_width(), a.kv_width()).bias(true));
        m->weight.zero_();
        m->bias.zero_();
        if (x.kv_width() == a.kv_width()) m->weight.copy_(torch::eye(a.kv_width()));
        m->to(base->dtype());
        (*maps)[l] = impl->register_module(absl::StrCat(maps == &impl->k_maps ? "k" : "v", l), m);
      }
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("KV prediction: ", e.what_without_backtrace()));
  }
  return KvPredictor(impl);
}

const Decoder& KvPredictor::base() const { return *impl_->base; }
Decoder& KvPredictor::auxiliary() { return *impl_->aux; }
std::vector<int> KvPredictor::layer_map() const { return impl_->map; }

KvPredictor::Outputs KvPredictor::Forward(const torch::Tensor& tokens) {
  Outputs o;
  KvCollector aux_kv(impl_->aux->arch().num_layers);
  o.aux_logits = impl_->aux->Forward(tokens, &aux_kv);
  std::vector<LayerKv> predicted = impl_->Predict(aux_kv.kv);
  KvCollector true_kv(impl_->base->arch().num_layers);
  {
    torch::NoGradGuard no_grad;
    impl_->base->Forward(tokens, &true_kv);
  }
  o.base_logits = impl_->base->ForwardWithKv(tokens, predicted);
  torch::Tensor l1 = torch::zeros({}, o.base_logits.options());
  int n = 0;
  for (size_t l = 0; l < predicted.size(); ++l) {
    if (!predicted[l].keys.defined()) continue;
    l1 = l1 + (predicted[l].keys - true_kv.kv[l].keys).abs().mean() +
         (predicted[l].values - true_kv.kv[l].values).abs().mean();
    n += 2;
  }
  o.consistency = n > 0 ? l1 / n : l1;
  return o;
}

torch::Tensor KvPredictor::Loss(const torch::Tensor& tokens, double consistency_weight,
                                double aux_weight) {
  if (consistency_weight < 0) consistency_weight = 1.0 / impl_->base->arch().num_layers;
  auto inputs = tokens.narrow(1, 0, tokens.size(1) - 1);
  auto targets = tokens.narrow(1, 1, tokens.size(1) - 1).reshape({-1});
  Outputs o = Forward(inputs);
  const int64_t v = impl_->base->arch().vocab_size;
  auto ce = [&](const torch::Tensor& logits) {
    return torch::nn::functional::cross_entropy(logits.reshape({-1, v}), targets);
  };
  return ce(o.base_logits) + aux_weight * ce(o.aux_logits) + consistency_weight * o.consistency;
}

std::vector<torch::Tensor> KvPredictor::TrainableParameters() {
  std::vector<torch::Tensor> out = impl_->aux->Parameters();
  for (const auto& p : impl_->parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> KvPredictor::PredictorTensors() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (int l = 0; l < static_cast<int>(impl_->k_maps.size()); ++l) {
    if (!impl_->k_maps[l]) continue;
    for (const char* kv : {"k", "v"}) {
      auto& m = kv[0] == 'k' ? impl_->k_maps[l] : impl_->v_maps[l];
      const std::string p = absl::StrCat("kv_predictor.layers.", l, ".", kv, ".");
      out.push_back({p + "weight", m->weight});
      out.push_back({p + "bias", m->bias});
    }
  }
  return out;
}

absl::StatusOr<Generation> KvPredictor::Generate(const std::vector<int64_t>& prompt,
                                                 const GenerateOptions& options) {
  if (prompt.size() < 2) {
    return absl::InvalidArgumentError("KV prediction needs a prompt of at least 2 tokens");
  }
  HILNAS_RETURN_IF_ERROR(ValidatePrompt(prompt, impl_->base->arch().vocab_size));
  const int64_t n = static_cast<int64_t>(prompt.size());
  return GenerateAfterPrefill(*impl_->base, n, n, options, [&](KvCache& cache) {
    auto prompt_t = torch::tensor(prompt, torch::kLong).view({1, n});
    KvCollector aux_kv(impl_->aux->arch().num_layers);
    impl_->aux->Forward(prompt_t.narrow(1, 0, n - 1), &aux_kv);
    impl_->base->FillCache(cache, impl_->Predict(aux_kv.kv));
    return impl_->base->ForwardCached(prompt_t.narrow(1, n - 1, 1), cache, /*last_only=*/true);
  });
}

absl::Status SaveKvpCheckpoint(KvPredictor& kvp, const std::string& dir, StorageDtype dtype) {
  HILNAS_RETURN_IF_ERROR(SaveCheckpoint(kvp.base(), dir, dtype));
  HILNAS_RETURN_IF_ERROR(SaveCheckpoint(kvp.auxiliary(), AuxiliaryDirName(dir), dtype));
  return WriteSafetensors(KvPredictorFileName(dir), kvp.PredictorTensors(), dtype);
}

absl::StatusOr<KvPredictor> LoadKvpCheckpoint(const std::string& dir, torch::Dtype dtype) {
  HILNAS_ASSIGN_OR_RETURN(Decoder base, LoadCheckpoint(dir, dtype));
  if (base.arch().kv_prediction.kind == KvPredictionSpec::Kind::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat(ConfigFileName(dir), ": not a KV-prediction checkpoint (no kv_prediction)"));
  }
  HILNAS_ASSIGN_OR_RETURN(Decoder aux, LoadCheckpoint(AuxiliaryDirName(dir), dtype));
  HILNAS_ASSIGN_OR_RETURN(KvPredictor kvp,
                          KvPredictor::Create(std::make_shared<Decoder>(std::move(base)), 0,
                                              std::make_shared<Decoder>(std::move(aux))));
  const std::string path = KvPredictorFileName(dir);
  HILNAS_ASSIGN_OR_RETURN(auto stored, ReadSafetensors(path));
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : kvp.PredictorTensors()) {
    auto it = stored.find(name);
    if (it == stored.end() || it->second.sizes() != t.sizes()) {
      return absl::DataLossError(absl::StrCat(
          path, ": tensor ", name, it == stored.end() ? " is missing" : " has the wrong shape"));
    }
    t.copy_(it->second.to(t.dtype()));
  }
  if (stored.size() != kvp.PredictorTensors().size()) {
    return absl::DataLossError(absl::StrCat(path, ": ", stored.size(), " tensors, expected ",
                                            kvp.PredictorTensors().size()));
  }
  return kvp;
}

}  // namespace hilnas
