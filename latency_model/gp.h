// Exact Gaussian-process regression in libtorch (float64): Matern-5/2 ARD
// kernel, learned lengthscales, outputscale and homoscedastic noise plus
// optional known per-point noise (the agents' standard errors), fit by
// maximising the log marginal likelihood with Adam over several restarts.
// The model layer of BoTorch's split (STYLE 16): Fit, Posterior, samples.
#ifndef HILNAS_LATENCY_MODEL_GP_H_
#define HILNAS_LATENCY_MODEL_GP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace at {
class Tensor;
}

namespace hilnas {

// Row-major n x d inputs, usually in [0,1]^d.
struct GpData {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  // Known observation variance of each y (same units as y squared); empty
  // means none. Added to the learned noise.
  std::vector<double> y_var;
};

struct GpOptions {
  // Restarts from random initial hyperparameters each take steps / 5 Adam
  // steps; the best continues to `steps` in all.
  int restarts = 3;
  int steps = 150;
  double learning_rate = 0.05;
  uint64_t seed = 0;
  // Log-normal lengthscale prior scaled with the dimension (Hvarfner et al.
  // 2024, BoTorch's default since 2024): loc sqrt(2) + log(d)/2, scale sqrt(3).
  // false: the older Gamma(3, 6) prior BoTorch used before.
  bool dimension_scaled_prior = true;
  double min_noise = 1e-6;  // on standardised outputs
  // Above this many points the hyperparameters are fitted on a seeded random
  // subset of this size (the likelihood costs O(n^3) per step), then polished
  // for `polish_steps` on all points; the posterior always conditions on all.
  // 0: always fit on everything.
  int max_fit_points = 300;
  int polish_steps = 30;
};

// Fitted hyperparameters, in natural units of the standardised problem.
struct GpHyperparameters {
  std::vector<double> lengthscales;
  double outputscale = 1;
  double noise = 1e-2;
};

struct GpPosterior {
  std::vector<double> mean;      // in the units of y
  std::vector<double> variance;  // latent function variance, units of y squared
};

// Immutable after Fit; Posterior and Samples are const and thread-safe.
class ExactGp {
 public:
  ExactGp() = default;  // empty: use Fit or FromParts
  // Drops rows whose y (or y_var) is NaN or infinite (counted in dropped()).
  // INVALID_ARGUMENT for ragged rows, fewer than 2 usable points, or
  // non-finite inputs. Constant outputs are fine (the GP predicts the constant).
  static absl::StatusOr<ExactGp> Fit(const GpData& data, const GpOptions& options = {});
  // Rebuilds a fitted model from stored data and hyperparameters (no fitting).
  static absl::StatusOr<ExactGp> FromParts(const GpData& data, const GpHyperparameters& h);

  absl::StatusOr<GpPosterior> Posterior(const std::vector<std::vector<double>>& x) const;
  // `n` joint draws of the latent function at the points of `x`, n x |x|.
  absl::StatusOr<std::vector<std::vector<double>>> Samples(
      const std::vector<std::vector<double>>& x, int n, uint64_t seed) const;

  const GpHyperparameters& hyperparameters() const { return h_; }
  const GpData& data() const { return data_; }  // the rows kept
  int dropped() const { return dropped_; }
  double log_marginal_likelihood() const { return lml_; }
  double jitter() const { return jitter_; }  // added to the diagonal for Cholesky

 private:
  struct State;
  absl::Status Prepare();

  GpData data_;
  GpHyperparameters h_;
  int dropped_ = 0;
  double lml_ = 0, jitter_ = 0;
  double y_mean_ = 0, y_std_ = 1;
  std::shared_ptr<State> state_;  // Cholesky factor and weights (tensors)
};

}  // namespace hilnas

#endif  // HILNAS_LATENCY_MODEL_GP_H_
