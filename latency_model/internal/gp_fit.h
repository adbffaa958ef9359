// Fitting the GP's hyperparameters: the likelihood (log marginal likelihood
// plus the lengthscale prior) and its maximisation (Adam over restarts,
// subset fit and polish). The fitting layer under ExactGp::Fit, as BoTorch
// keeps `fit_gpytorch_mll` apart from the model and the likelihood.
// Internal: included only by latency_model/ .cc files.
#ifndef HILNAS_LATENCY_MODEL_INTERNAL_GP_FIT_H_
#define HILNAS_LATENCY_MODEL_INTERNAL_GP_FIT_H_

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "latency_model/gp.h"

namespace hilnas::internal {

// A standardised regression problem.
struct GpProblem {
  torch::Tensor x;      // [n, d] inputs
  torch::Tensor ys;     // [n, 1] standardised outputs
  torch::Tensor known;  // [n] known noise variance, in standardised units
};

// The log marginal likelihood of `p` under a Matern-5/2 GP with these log
// hyperparameters (differentiable), or an undefined tensor when the kernel
// matrix is not positive definite.
torch::Tensor LogMarginalLikelihood(const GpProblem& p, const torch::Tensor& log_ls,
                                    const torch::Tensor& log_os, const torch::Tensor& log_noise,
                                    double min_noise);

// The log density (up to a constant) of the lengthscale prior: dimension-
// scaled log-normal (Hvarfner et al. 2024) or Gamma(3, 6) (GpOptions).
torch::Tensor LogLengthscalePrior(const torch::Tensor& log_ls, int64_t d,
                                  bool dimension_scaled_prior);

struct FittedHyperparameters {
  GpHyperparameters h;
  double lml = 0;  // at the returned hyperparameters, on the points it was last fitted on
};

// Maximises likelihood + prior over `options.restarts` starts (a fifth of
// the steps each, the best continues) on at most `options.max_fit_points`
// seeded points, then polishes on all. INTERNAL when no start reaches a
// positive-definite kernel. May throw c10::Error (caught by ExactGp::Fit).
absl::StatusOr<FittedHyperparameters> FitHyperparameters(const GpProblem& problem,
                                                         const GpOptions& options);

}  // namespace hilnas::internal

#endif  // HILNAS_LATENCY_MODEL_INTERNAL_GP_FIT_H_
