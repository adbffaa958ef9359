#include "pruner/metrics.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "util/files.h"
#include "util/fnv.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;

// Sums what the metrics average, in float64.
class MetricObserver : public ForwardObserver {
 public:
  explicit MetricObserver(const Arch& a)
      : ffn_(torch::zeros({a.num_layers, a.d_ffn}, torch::kDouble)),
        model_dim_(torch::zeros({a.d_model}, torch::kDouble)),
        layer_(torch::zeros({a.num_layers}, torch::kDouble)) {}

  void OnBlockNorm(int, const torch::Tensor& normed) override {
    model_dim_ += normed.abs().to(torch::kDouble).sum(std::vector<int64_t>{0, 1});
  }
  void OnFfnHidden(int layer, const torch::Tensor& hidden) override {
    ffn_[layer] += hidden.abs().to(torch::kDouble).sum(std::vector<int64_t>{0, 1});
  }
  void OnLayer(int layer, const torch::Tensor& in, const torch::Tensor& out) override {
    auto cos = torch::cosine_similarity(in.to(torch::kDouble), out.to(torch::kDouble), -1);
    layer_[layer] += cos.sum();
  }

  torch::Tensor ffn_, model_dim_, layer_;
};

std::vector<double> ToVector(const torch::Tensor& t) {
  auto c = t.contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

}  // namespace

absl::StatusOr<std::string> CheckpointFingerprint(const std::string& dir) {
  HILNAS_ASSIGN_OR_RETURN(auto reader, CheckpointReader::Open(dir));
  return reader->Fingerprint();
}

absl::StatusOr<ActivationMetrics> Calibrate(Decoder& model, const std::vector<int32_t>& tokens,
                                            const CalibrationOptions& o,
                                            const std::function<void(int64_t, int64_t)>& progress) {
  const Arch& a = model.arch();
  if (o.seq_len < 1 || o.batch_size < 1) {
    return absl::InvalidArgumentError("calibration: seq_len and batch_size must be >= 1");
  }
  const int64_t usable = std::min<int64_t>(tokens.size(), o.max_tokens);
  const int64_t windows = usable / o.seq_len;
  if (windows < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration: ", tokens.size(), " tokens do not fill one window of ", o.seq_len));
  }
  for (int64_t i = 0; i < windows * o.seq_len; ++i) {
    if (tokens[i] < 0 || tokens[i] >= a.vocab_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibration token ", tokens[i], " at position ", i,
                       " is outside the backbone's vocabulary ", a.vocab_size));
    }
  }
  MetricObserver obs(a);
  try {
    torch::NoGradGuard no_grad;
    model.module().eval();
    for (int64_t w = 0; w < windows; w += o.batch_size) {
      const int64_t b = std::min(o.batch_size, windows - w);
      auto batch = torch::empty({b, o.seq_len}, torch::kLong);
      auto acc = batch.accessor<int64_t, 2>();
      for (int64_t i = 0; i < b; ++i) {
        for (int64_t j = 0; j < o.seq_len; ++j) acc[i][j] = tokens[(w + i) * o.seq_len + j];
      }
      model.Forward(batch, &obs);
      if (progress) progress((w + b) * o.seq_len, windows * o.seq_len);
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("calibration: ", e.what_without_backtrace()));
  }
  const double n = static_cast<double>(windows * o.seq_len);
  ActivationMetrics m;
  m.backbone_name = a.name;
  m.num_layers = a.num_layers;
  m.d_model = a.d_model;
  m.d_ffn = a.d_ffn;
  m.tokens = windows * o.seq_len;
  for (int l = 0; l < a.num_layers; ++l) m.ffn.push_back(ToVector(obs.ffn_[l] / n));
  // Each block norm saw all N positions once.
  const int64_t norms_per_pass = a.num_layers + a.num_attention_layers();
  m.model_dim = ToVector(obs.model_dim_ / (n * norms_per_pass));
  m.layer = ToVector(1.0 - obs.layer_ / n);
  // NaN or Inf weights make NaN metrics, which JSON cannot hold (they would
  // be written as null and break `prune` later): refuse them here.
  auto finite = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
  };
  bool ok = finite(m.layer) && finite(m.model_dim);
  for (const auto& f : m.ffn) ok = ok && finite(f);
  if (!ok) {
    return absl::DataLossError(
        "calibration produced NaN or Inf activation metrics: the checkpoint holds non-finite "
        "weights (`hilnas checkpoint check --values DIR` names them)");
  }
  return m;
}

absl::Status SaveMetrics(const ActivationMetrics& m, const std::string& path) {
  nlohmann::json j;
  j["format"] = "hilnas-activation-metrics-v1";
  j["backbone_fingerprint"] = m.backbone_fingerprint;
  j["backbone_name"] = m.backbone_name;
  j["num_layers"] = m.num_layers;
  j["d_model"] = m.d_model;
  j["d_ffn"] = m.d_ffn;
  j["tokens"] = m.tokens;
  j["layer_metric"] = m.layer;
  j["model_dim_metric"] = m.model_dim;
  j["ffn_metric"] = m.ffn;
  return WriteFileAtomically(path, j.dump() + "\n");
}

absl::StatusOr<ActivationMetrics> LoadMetrics(const std::string& path) {
  std::string text;
  HILNAS_RETURN_IF_ERROR(ReadFileToString(path, &text));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", "") != "hilnas-activation-metrics-v1") {
    return absl::DataLossError(
        absl::StrCat("metrics file ", path, " is not hilnas activation metrics (truncated?)"));
  }
  ActivationMetrics m;
  try {
    m.backbone_fingerprint = j.at("backbone_fingerprint").get<std::string>();
    m.backbone_name = j.at("backbone_name").get<std::string>();
    m.num_layers = j.at("num_layers").get<int>();
    m.d_model = j.at("d_model").get<int>();
    m.d_ffn = j.at("d_ffn").get<int>();
    m.tokens = j.at("tokens").get<int64_t>();
    m.layer = j.at("layer_metric").get<std::vector<double>>();
    m.model_dim = j.at("model_dim_metric").get<std::vector<double>>();
    m.ffn = j.at("ffn_metric").get<std::vector<std::vector<double>>>();
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("metrics file ", path, ": ", e.what()));
  }
  auto bad = [&](const std::string& field, size_t got, int want) {
    return absl::DataLossError(
        absl::StrCat("metrics file ", path, ": ", field, " has ", got, " entries, want ", want));
  };
  if (m.layer.size() != static_cast<size_t>(m.num_layers)) {
    return bad("layer_metric", m.layer.size(), m.num_layers);
  }
  if (m.model_dim.size() != static_cast<size_t>(m.d_model)) {
    return bad("model_dim_metric", m.model_dim.size(), m.d_model);
  }
  if (m.ffn.size() != static_cast<size_t>(m.num_layers)) {
    return bad("ffn_metric", m.ffn.size(), m.num_layers);
  }
  for (size_t l = 0; l < m.ffn.size(); ++l) {
    if (m.ffn[l].size() != static_cast<size_t>(m.d_ffn)) {
      return bad(absl::StrCat("ffn_metric[", l, "]"), m.ffn[l].size(), m.d_ffn);
    }
  }
  return m;
}

absl::Status CheckMetricsMatch(const ActivationMetrics& m, const std::string& metrics_path,
                               CheckpointReader& checkpoint) {
  const Arch& arch = checkpoint.arch();
  const std::string& checkpoint_dir = checkpoint.dir();
  if (m.num_layers != arch.num_layers || m.d_model != arch.d_model || m.d_ffn != arch.d_ffn) {
    return absl::FailedPreconditionError(absl::StrCat(
        "metrics ", metrics_path, " are for a ", m.num_layers, "-layer d_model ", m.d_model,
        " d_ffn ", m.d_ffn, " model (", m.backbone_name, "), but ", checkpoint_dir, " is ",
        arch.num_layers, "-layer d_model ", arch.d_model, " d_ffn ", arch.d_ffn));
  }
  HILNAS_ASSIGN_OR_RETURN(std::string fp, checkpoint.Fingerprint());
  if (fp != m.backbone_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat("metrics ", metrics_path, " were computed on another backbone (fingerprint ",
                     m.backbone_fingerprint, ") than ", checkpoint_dir, " (", fp,
                     "); run `hilnas calibrate` on it"));
  }
  return absl::OkStatus();
}

}  // namespace hilnas
