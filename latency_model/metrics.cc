#include "latency_model/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace hilnas {

double KendallTau(const std::vector<double>& a, const std::vector<double>& b) {
  // O(n^2): n is at most a few thousand measured architectures.
  const size_t n = a.size();
  double concordant = 0, discordant = 0, ties_a = 0, ties_b = 0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      const double da = a[i] - a[j], db = b[i] - b[j];
      if (da == 0 && db == 0) continue;
      if (da == 0) {
        ++ties_a;
      } else if (db == 0) {
        ++ties_b;
      } else if ((da > 0) == (db > 0)) {
        ++concordant;
      } else {
        ++discordant;
      }
    }
  }
  const double denom =
      std::sqrt((concordant + discordant + ties_a) * (concordant + discordant + ties_b));
  return denom == 0 ? 0 : (concordant - discordant) / denom;
}

double RSquared(const std::vector<double>& y, const std::vector<double>& p) {
  const double mean = std::accumulate(y.begin(), y.end(), 0.0) / y.size();
  double res = 0, tot = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    res += (y[i] - p[i]) * (y[i] - p[i]);
    tot += (y[i] - mean) * (y[i] - mean);
  }
  return tot == 0 ? 0 : 1 - res / tot;
}

double ShareWithin(const std::vector<double>& measured, const std::vector<double>& predicted,
                   double tolerance) {
  if (measured.empty()) return 0;
  int within = 0;
  for (size_t i = 0; i < measured.size(); ++i) {
    within += measured[i] > 0 && std::abs(predicted[i] / measured[i] - 1) <= tolerance + 1e-12;
  }
  return static_cast<double>(within) / static_cast<double>(measured.size());
}

double Rmse(const std::vector<double>& y, const std::vector<double>& p) {
  double ss = 0;
  for (size_t i = 0; i < y.size(); ++i) ss += (y[i] - p[i]) * (y[i] - p[i]);
  return std::sqrt(ss / y.size());
}

absl::StatusOr<GpPosterior> CrossValidate(const GpData& data, int k, const GpOptions& options) {
  const int n = static_cast<int>(data.y.size());
  if (k < 2 || k > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("cross-validation: ", k, " folds for ", n, " points; need 2 <= k <= n"));
  }
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(options.seed));
  GpPosterior out;
  out.mean.assign(n, std::nan(""));
  out.variance.assign(n, std::nan(""));
  for (int f = 0; f < k; ++f) {
    GpData train;
    std::vector<int> test;
    for (int i = 0; i < n; ++i) {
      const int idx = order[i];
      if (i % k == f) {
        test.push_back(idx);
        continue;
      }
      train.x.push_back(data.x[idx]);
      train.y.push_back(data.y[idx]);
      if (!data.y_var.empty()) train.y_var.push_back(data.y_var[idx]);
    }
    absl::StatusOr<ExactGp> gp = ExactGp::Fit(train, options);
    if (!gp.ok()) return gp.status();
    std::vector<std::vector<double>> xs;
    for (int idx : test) xs.push_back(data.x[idx]);
    absl::StatusOr<GpPosterior> p = gp->Posterior(xs);
    if (!p.ok()) return p.status();
    for (size_t t = 0; t < test.size(); ++t) {
      out.mean[test[t]] = p->mean[t];
      out.variance[test[t]] = p->variance[t];
    }
  }
  return out;
}

}  // namespace hilnas
