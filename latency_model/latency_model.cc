#include "latency_model/latency_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "latency_model/metrics.h"
#include "search_space/counts.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

// 2 added the nested prior model; version 1 files still load.
constexpr int kFormatVersion = 2;
constexpr int kMaxPriorDepth = 4;  // a prior of a prior of ...: bounded for hostile files

}  // namespace

absl::StatusOr<LatencyMetric> ParseLatencyMetric(const std::string& name) {
  if (name == "ttft") return LatencyMetric::kTtft;
  if (name == "decode") return LatencyMetric::kDecode;
  return absl::InvalidArgumentError(absl::StrCat("metric \"", name, "\" is not ttft or decode"));
}

const char* LatencyMetricName(LatencyMetric m) {
  return m == LatencyMetric::kTtft ? "ttft" : "decode";
}

std::vector<const LatencyRow*> LatencyModel::Select(int prompt_tokens,
                                                    const std::vector<LatencyRow>& data) {
  std::vector<const LatencyRow*> out;
  for (const LatencyRow& r : data) {
    if (prompt_tokens == 0 || r.prompt_tokens == prompt_tokens) out.push_back(&r);
  }
  return out;
}

double LatencyModel::Measured(LatencyMetric m, const LatencyRow& r) {
  return m == LatencyMetric::kTtft ? r.ttft_ms : r.decode_ms;
}

double LatencyModel::MeasuredSe(LatencyMetric m, const LatencyRow& r) {
  return m == LatencyMetric::kTtft ? r.ttft_se_ms : r.decode_se_ms;
}

// log FLOPs of the phase the metric times, and log parameter count: the
// proxies of MobileLLM-Flash Tab. 2, here as extra GP inputs; then the prior
// device's predicted log ms.
absl::StatusOr<std::vector<double>> LatencyModel::RawDerived(const Arch& a) const {
  const double flops = metric_ == LatencyMetric::kTtft
                           ? PrefillFlops(a, prompt_tokens_)
                           : DecodeFlops(a, std::max(1, prompt_tokens_));
  std::vector<double> d = {std::log(flops),
                           std::log(static_cast<double>(CountParameters(a).model()))};
  if (prior_ != nullptr) {
    absl::StatusOr<std::vector<LatencyPrediction>> p = prior_->Predict({a});
    if (!p.ok()) return p.status();
    d.push_back(std::log((*p)[0].median_ms));
  }
  return d;
}

absl::StatusOr<std::vector<double>> LatencyModel::Features(const Arch& arch) const {
  absl::StatusOr<std::vector<double>> x = space_.Encode(arch);
  if (!x.ok()) return x.status();
  absl::StatusOr<std::vector<double>> derived = RawDerived(arch);
  if (!derived.ok()) return derived.status();
  const std::vector<double>& d = *derived;
  for (size_t i = 0; i < d.size(); ++i) {
    const double span = feature_max_[i] - feature_min_[i];
    x->push_back(span > 0 ? (d[i] - feature_min_[i]) / span : 0.5);
  }
  return x;
}

absl::StatusOr<LatencyModel> LatencyModel::Fit(const Space& space, const std::string& device_class,
                                               LatencyMetric metric, int prompt_tokens,
                                               const std::vector<LatencyRow>& data,
                                               const GpOptions& options,
                                               const LatencyModel* prior) {
  LatencyModel m(space);
  m.device_class_ = device_class;
  m.metric_ = metric;
  m.prompt_tokens_ = prompt_tokens;
  m.feature_names_ = space.dimension_names();
  m.feature_names_.push_back(metric == LatencyMetric::kTtft ? "log_prefill_flops"
                                                            : "log_decode_flops");
  m.feature_names_.push_back("log_params");
  if (prior != nullptr) {
    if (prior->metric() != metric) {
      return absl::InvalidArgumentError(
          absl::StrCat("prior model of ", prior->device_class(), " predicts ",
                       LatencyMetricName(prior->metric()), ", not ", LatencyMetricName(metric)));
    }
    if (prior->space().proto().SerializeAsString() != space.proto().SerializeAsString()) {
      return absl::FailedPreconditionError(absl::StrCat("prior model of ", prior->device_class(),
                                                        " was fitted on a different search space"));
    }
    m.prior_ = std::make_shared<const LatencyModel>(*prior);
    m.feature_names_.push_back(absl::StrCat("log_ms_on_", prior->device_class()));
  }
  const size_t derived = m.feature_names_.size() - space.dimensions();
  const std::vector<const LatencyRow*> rows = Select(prompt_tokens, data);
  if (rows.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("latency model: ", rows.size(),
                                                   " rows at prompt length ", prompt_tokens,
                                                   "; need at least 2"));
  }
  m.feature_min_.assign(derived, INFINITY);
  m.feature_max_.assign(derived, -INFINITY);
  for (const LatencyRow* r : rows) {
    absl::StatusOr<std::vector<double>> raw = m.RawDerived(r->arch);
    if (!raw.ok()) return raw.status();
    const std::vector<double>& d = *raw;
    for (size_t i = 0; i < d.size(); ++i) {
      m.feature_min_[i] = std::min(m.feature_min_[i], d[i]);
      m.feature_max_[i] = std::max(m.feature_max_[i], d[i]);
    }
  }
  GpData gd;
  for (const LatencyRow* r : rows) {
    absl::StatusOr<std::vector<double>> x = m.Features(r->arch);
    if (!x.ok()) return x.status();
    const double ms = Measured(metric, *r), se = MeasuredSe(metric, *r);
    gd.x.push_back(*std::move(x));
    gd.y.push_back(ms > 0 ? std::log(ms) : NAN);  // non-positive times are dropped
    gd.y_var.push_back(ms > 0 ? (se / ms) * (se / ms) : 0.0);
  }
  // Least-squares line of log ms in the scaled log-FLOPs feature, or in the
  // prior device's scaled log ms: the affine map from device A to B.
  const size_t regressor = m.TrendFeature();
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < gd.y.size(); ++i) {
    if (!std::isfinite(gd.y[i])) continue;
    const double x = gd.x[i][regressor];
    n += 1, sx += x, sy += gd.y[i], sxx += x * x, sxy += x * gd.y[i];
  }
  const double var = n > 0 ? sxx / n - (sx / n) * (sx / n) : 0;
  if (n >= 3 && var > 1e-12) {
    m.trend_slope_ = (sxy / n - (sx / n) * (sy / n)) / var;
    m.trend_intercept_ = sy / n - m.trend_slope_ * sx / n;
  } else if (prior != nullptr && n > 0) {
    // Too few points for a slope: B is A shifted by a constant factor.
    m.trend_slope_ = m.feature_max_.back() - m.feature_min_.back();  // raw slope 1
    m.trend_intercept_ = sy / n - m.trend_slope_ * sx / n;
  }
  for (size_t i = 0; i < gd.y.size(); ++i) gd.y[i] -= m.Trend(gd.x[i]);
  absl::StatusOr<ExactGp> gp = ExactGp::Fit(gd, options);
  if (!gp.ok()) return gp.status();
  m.gp_ = *std::move(gp);
  return m;
}

double LatencyModel::Trend(const std::vector<double>& features) const {
  return trend_intercept_ + trend_slope_ * features[TrendFeature()];
}

absl::StatusOr<std::vector<std::vector<double>>> LatencyModel::SampleLogMs(
    const std::vector<Arch>& archs, int n, uint64_t seed) const {
  std::vector<std::vector<double>> xs;
  for (const Arch& a : archs) {
    absl::StatusOr<std::vector<double>> x = Features(a);
    if (!x.ok()) return x.status();
    xs.push_back(*std::move(x));
  }
  absl::StatusOr<std::vector<std::vector<double>>> draws = gp_.Samples(xs, n, seed);
  if (!draws.ok()) return draws.status();
  for (auto& row : *draws) {
    for (size_t i = 0; i < row.size(); ++i) row[i] += Trend(xs[i]);
  }
  return draws;
}

absl::StatusOr<std::vector<LatencyPrediction>> LatencyModel::Predict(
    const std::vector<Arch>& archs) const {
  std::vector<std::vector<double>> xs;
  for (const Arch& a : archs) {
    absl::StatusOr<std::vector<double>> x = Features(a);
    if (!x.ok()) return x.status();
    xs.push_back(*std::move(x));
  }
  absl::StatusOr<GpPosterior> p = gp_.Posterior(xs);
  if (!p.ok()) return p.status();
  std::vector<LatencyPrediction> out(archs.size());
  for (size_t i = 0; i < archs.size(); ++i) {
    p->mean[i] += Trend(xs[i]);
    const double sd = std::sqrt(p->variance[i]);
    out[i].median_ms = std::exp(p->mean[i]);
    out[i].log_sd = sd;
    out[i].lower_ms = std::exp(p->mean[i] - 2 * sd);
    out[i].upper_ms = std::exp(p->mean[i] + 2 * sd);
  }
  return out;
}

LatencyModelFile LatencyModel::ToFile() const {
  LatencyModelFile f;
  f.set_format_version(kFormatVersion);
  *f.mutable_space() = space_.proto();
  f.set_device_class(device_class_);
  f.set_metric(LatencyMetricName(metric_));
  f.set_prompt_tokens(prompt_tokens_);
  for (const std::string& n : feature_names_) f.add_feature_names(n);
  for (double v : feature_min_) f.add_feature_min(v);
  for (double v : feature_max_) f.add_feature_max(v);
  const GpHyperparameters& h = gp_.hyperparameters();
  for (double v : h.lengthscales) f.add_lengthscales(v);
  f.set_outputscale(h.outputscale);
  f.set_noise(h.noise);
  f.set_trend_intercept(trend_intercept_);
  f.set_trend_slope(trend_slope_);
  const GpData& d = gp_.data();
  for (size_t i = 0; i < d.y.size(); ++i) {
    LatencyModelFile::Row* r = f.add_rows();
    for (double v : d.x[i]) r->add_x(v);
    r->set_y(d.y[i]);
    r->set_y_var(d.y_var.empty() ? 0.0 : d.y_var[i]);
  }
  if (prior_ != nullptr) *f.mutable_prior() = prior_->ToFile();
  return f;
}

absl::Status LatencyModel::Save(const std::string& path) const {
  return WriteFileAtomically(path, ToFile().SerializeAsString());
}

absl::StatusOr<LatencyModel> LatencyModel::Load(const std::string& path, const Space& space) {
  std::string bytes;
  absl::Status s = ReadFileToString(path, &bytes);
  if (!s.ok()) return s;
  LatencyModelFile f;
  if (!f.ParseFromString(bytes) || f.format_version() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a hilnas latency model file"));
  }
  return FromFile(f, path, space, 0);
}

absl::StatusOr<LatencyModel> LatencyModel::FromFile(const LatencyModelFile& f,
                                                    const std::string& origin, const Space& space,
                                                    int depth) {
  const std::string path = depth == 0 ? origin : absl::StrCat(origin, " (prior ", depth, ")");
  if (f.format_version() < 1 || f.format_version() > kFormatVersion) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": format version ", f.format_version(),
                                                   "; this hilnas reads 1 to ", kFormatVersion));
  }
  if (f.space().SerializeAsString() != space.proto().SerializeAsString()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": fitted on a different search space (", f.space().ShortDebugString().substr(0, 120),
        "...); refit it on this space or pass the space it was fitted on"));
  }
  absl::StatusOr<LatencyMetric> metric = ParseLatencyMetric(f.metric());
  if (!metric.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", metric.status().message()));
  LatencyModel m(space);
  m.device_class_ = f.device_class();
  m.metric_ = *metric;
  m.prompt_tokens_ = f.prompt_tokens();
  if (f.has_prior()) {
    if (depth >= kMaxPriorDepth) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": prior models nested deeper than ", kMaxPriorDepth));
    }
    absl::StatusOr<LatencyModel> prior = FromFile(f.prior(), origin, space, depth + 1);
    if (!prior.ok()) return prior.status();
    if (prior->metric() != m.metric_) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": its prior model predicts ", LatencyMetricName(prior->metric())));
    }
    m.prior_ = std::make_shared<const LatencyModel>(*std::move(prior));
  }
  m.feature_names_.assign(f.feature_names().begin(), f.feature_names().end());
  m.feature_min_.assign(f.feature_min().begin(), f.feature_min().end());
  m.feature_max_.assign(f.feature_max().begin(), f.feature_max().end());
  const size_t derived = m.prior_ != nullptr ? 3 : 2;
  if (m.feature_min_.size() != derived || m.feature_max_.size() != derived ||
      static_cast<size_t>(f.lengthscales_size()) != space.dimensions() + derived) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": ", f.lengthscales_size(), " lengthscales for ",
                     space.dimensions() + derived, " features; the file is corrupt"));
  }
  m.trend_intercept_ = f.trend_intercept();
  m.trend_slope_ = f.trend_slope();
  GpHyperparameters h;
  h.lengthscales.assign(f.lengthscales().begin(), f.lengthscales().end());
  h.outputscale = f.outputscale();
  h.noise = f.noise();
  GpData d;
  for (const auto& r : f.rows()) {
    d.x.emplace_back(r.x().begin(), r.x().end());
    d.y.push_back(r.y());
    d.y_var.push_back(r.y_var());
  }
  absl::StatusOr<ExactGp> gp = ExactGp::FromParts(d, h);
  if (!gp.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", gp.status().message()));
  m.gp_ = *std::move(gp);
  return m;
}

absl::StatusOr<LatencyCv> CrossValidateLatency(const LatencyModel& model,
                                               const std::vector<LatencyRow>& data, int k,
                                               const GpOptions& options) {
  LatencyCv cv;
  cv.rows = LatencyModel::Select(model.prompt_tokens(), data);
  const int n = static_cast<int>(cv.rows.size());
  k = std::min(k, n);
  if (k < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("cross-validation: ", k, " folds for ", n, " points; need 2 <= k <= n"));
  }
  // Each fold refits the whole model (trend, feature scaling and GP) on the
  // other folds; folds are a seeded shuffle.
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(options.seed));
  cv.predicted_ms.assign(n, NAN);
  for (int f = 0; f < k; ++f) {
    std::vector<LatencyRow> train;
    std::vector<int> test;
    std::vector<Arch> test_archs;
    for (int i = 0; i < n; ++i) {
      if (i % k == f) {
        test.push_back(order[i]);
        test_archs.push_back(cv.rows[order[i]]->arch);
      } else {
        train.push_back(*cv.rows[order[i]]);
      }
    }
    absl::StatusOr<LatencyModel> m =
        LatencyModel::Fit(model.space(), model.device_class(), model.metric(),
                          model.prompt_tokens(), train, options, model.prior());
    if (!m.ok()) return m.status();
    absl::StatusOr<std::vector<LatencyPrediction>> p = m->Predict(test_archs);
    if (!p.ok()) return p.status();
    for (size_t t = 0; t < test.size(); ++t) cv.predicted_ms[test[t]] = (*p)[t].median_ms;
  }
  for (const LatencyRow* r : cv.rows) {
    const double ms = LatencyModel::Measured(model.metric(), *r);
    cv.measured_ms.push_back(ms);
    cv.log_measured.push_back(std::log(ms));
  }
  for (double ms : cv.predicted_ms) cv.log_predicted.push_back(std::log(ms));
  cv.r2 = RSquared(cv.measured_ms, cv.predicted_ms);
  cv.r2_log = RSquared(cv.log_measured, cv.log_predicted);
  cv.rmse_ms = Rmse(cv.measured_ms, cv.predicted_ms);
  cv.tau = KendallTau(cv.measured_ms, cv.predicted_ms);
  return cv;
}

}  // namespace hilnas
