// How well a latency predictor ranks and fits: the diagnostics the
// MobileLLM-Flash paper reports (Sec. 3.4: cross-validated R^2 0.97; Tab. 2:
// Kendall tau of parameter count and FLOPs against measured latency).
#ifndef HILNAS_LATENCY_MODEL_METRICS_H_
#define HILNAS_LATENCY_MODEL_METRICS_H_

#include <vector>

#include "absl/status/statusor.h"
#include "latency_model/gp.h"

namespace hilnas {

// Kendall's tau-b (ties in either variable handled). REQUIRES equal sizes.
double KendallTau(const std::vector<double>& a, const std::vector<double>& b);
// 1 - SS_res / SS_tot of `predicted` against `measured`.
double RSquared(const std::vector<double>& measured, const std::vector<double>& predicted);
double Rmse(const std::vector<double>& measured, const std::vector<double>& predicted);
// The share of predictions within +/-tolerance of the measurement
// (|predicted / measured - 1| <= tolerance): nn-Meter's and LitePred's
// accuracy convention (nn-Meter: 99.0% within 10% on a Pixel 4 CPU).
double ShareWithin(const std::vector<double>& measured, const std::vector<double>& predicted,
                   double tolerance);

// Out-of-fold posterior means and variances from k-fold cross-validation:
// each point is predicted by a GP fitted without its fold. Folds are a
// seeded shuffle. INVALID_ARGUMENT for k < 2 or k > n.
absl::StatusOr<GpPosterior> CrossValidate(const GpData& data, int k, const GpOptions& options);

}  // namespace hilnas

#endif  // HILNAS_LATENCY_MODEL_METRICS_H_
