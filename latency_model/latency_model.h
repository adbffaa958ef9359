// One latency model per (device class, metric, prompt length): a GP on the
// encoded architecture plus derived features (log FLOPs, log parameters),
// predicting log milliseconds, so errors are relative and predictions stay
// positive. Its prior mean is a least-squares line in log FLOPs (the
// analytic estimate as a prior mean): with the few points of a stage-1
// budget the GP then starts from the FLOPs proxy's ranking and learns what
// FLOPs miss (attention pattern, memory-bound layers) as it grows. Measured standard errors become
// per-point noise (delta method: var(log t) ~ (se / t)^2). MobileLLM-Flash Sec. 3.4 fits the same
// kind of GP on ~800 on-device TTFT measurements.
//
// A new device from a few points (issue 18): fitted with a prior model of
// another device, the model takes that device's predicted log ms as one
// more input, and its prior mean becomes an affine map of it (learned from
// the new device's points) instead of the FLOPs line. The GP learns what
// differs. HELP (Lee et al. 2021) and MAPLE-Edge (Nair et al. 2022) report
// ~10 measurements suffice on an unseen device with such transfer.
#ifndef HILNAS_LATENCY_MODEL_LATENCY_MODEL_H_
#define HILNAS_LATENCY_MODEL_LATENCY_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "latency_model/dataset.h"
#include "latency_model/gp.h"
#include "proto/latency.pb.h"
#include "search_space/space.h"

namespace hilnas {

enum class LatencyMetric { kTtft, kDecode };
absl::StatusOr<LatencyMetric> ParseLatencyMetric(const std::string& name);  // "ttft", "decode"
const char* LatencyMetricName(LatencyMetric m);

struct LatencyPrediction {
  double median_ms = 0;               // exp(posterior mean of log ms)
  double log_sd = 0;                  // posterior sd of log ms
  double lower_ms = 0, upper_ms = 0;  // +- 2 sd
};

class LatencyModel {
 public:
  // Fits on the rows of `data` at `prompt_tokens` (decode: any prompt length
  // when prompt_tokens is 0). INVALID_ARGUMENT when fewer than 2 rows match.
  // With `prior` (another device's model of the same metric on the same
  // space, copied in), its prediction is an input and the trend's regressor.
  static absl::StatusOr<LatencyModel> Fit(const Space& space, const std::string& device_class,
                                          LatencyMetric metric, int prompt_tokens,
                                          const std::vector<LatencyRow>& data,
                                          const GpOptions& options = {},
                                          const LatencyModel* prior = nullptr);

  absl::StatusOr<std::vector<LatencyPrediction>> Predict(const std::vector<Arch>& archs) const;
  // `n` joint posterior draws of log ms at `archs`, n x |archs|.
  absl::StatusOr<std::vector<std::vector<double>>> SampleLogMs(const std::vector<Arch>& archs,
                                                               int n, uint64_t seed) const;
  // The prior mean (log ms) at a feature vector from Features(); the GP
  // models log ms minus this.
  double Trend(const std::vector<double>& features) const;
  // The other device's model this one was fitted on top of, or null.
  const LatencyModel* prior() const { return prior_.get(); }

  // Binary LatencyModelFile (a prior model nested in it), written atomically.
  absl::Status Save(const std::string& path) const;
  // FAILED_PRECONDITION when the file was fitted on a different search space
  // than `space`; INVALID_ARGUMENT for a corrupt file or unknown version.
  static absl::StatusOr<LatencyModel> Load(const std::string& path, const Space& space);

  // The GP inputs of an architecture: its encoding, then the derived features.
  absl::StatusOr<std::vector<double>> Features(const Arch& arch) const;
  const std::vector<std::string>& feature_names() const { return feature_names_; }
  // The GP of the residual log ms (log ms minus Trend).
  const ExactGp& gp() const { return gp_; }
  const Space& space() const { return space_; }
  LatencyMetric metric() const { return metric_; }
  int prompt_tokens() const { return prompt_tokens_; }
  const std::string& device_class() const { return device_class_; }

  // Rows of `data` at `prompt_tokens` (all rows for 0), and a row's measured
  // ms and standard error for a metric.
  static std::vector<const LatencyRow*> Select(int prompt_tokens,
                                               const std::vector<LatencyRow>& data);
  static double Measured(LatencyMetric metric, const LatencyRow& row);
  static double MeasuredSe(LatencyMetric metric, const LatencyRow& row);

 private:
  LatencyModel(const Space& space) : space_(space) {}
  // log FLOPs, log parameters, and the prior's predicted log ms when there
  // is a prior, unscaled.
  absl::StatusOr<std::vector<double>> RawDerived(const Arch& arch) const;
  // Index in Features() of the trend's regressor.
  size_t TrendFeature() const { return space_.dimensions() + (prior_ != nullptr ? 2 : 0); }
  LatencyModelFile ToFile() const;
  static absl::StatusOr<LatencyModel> FromFile(const LatencyModelFile& f, const std::string& path,
                                               const Space& space, int depth);

  Space space_;
  std::string device_class_;
  LatencyMetric metric_ = LatencyMetric::kTtft;
  int prompt_tokens_ = 0;
  std::vector<std::string> feature_names_;
  std::vector<double> feature_min_, feature_max_;
  double trend_intercept_ = 0, trend_slope_ = 0;
  ExactGp gp_;
  std::shared_ptr<const LatencyModel> prior_;  // immutable once fitted: shared by copies
};

// k-fold cross-validation of a model's GP on its own rows of `data` (the
// rows Select picks for its prompt length), on the same features: what
// MobileLLM-Flash Sec. 3.4 reports (R^2 0.97) and stage 1 stops on.
struct LatencyCv {
  std::vector<const LatencyRow*> rows;
  std::vector<double> measured_ms, predicted_ms;
  std::vector<double> log_measured, log_predicted;
  double r2 = 0, r2_log = 0, rmse_ms = 0, tau = 0;
};
absl::StatusOr<LatencyCv> CrossValidateLatency(const LatencyModel& model,
                                               const std::vector<LatencyRow>& data, int k,
                                               const GpOptions& options);

}  // namespace hilnas

#endif  // HILNAS_LATENCY_MODEL_LATENCY_MODEL_H_
