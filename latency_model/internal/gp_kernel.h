// The GP model's tensor pieces, shared by the posterior (gp.cc) and the
// hyperparameter fit (gp_fit.cc). Internal: only latency_model/ .cc files
// that already include libtorch include this.
#ifndef HILNAS_LATENCY_MODEL_INTERNAL_GP_KERNEL_H_
#define HILNAS_LATENCY_MODEL_INTERNAL_GP_KERNEL_H_

#include <torch/torch.h>

#include <utility>
#include <vector>

namespace hilnas::internal {

constexpr auto kF64 = torch::kFloat64;

// Mean and sample standard deviation (1 for constant outputs, so the GP
// predicts the constant instead of dividing by zero).
std::pair<double, double> Standardisation(const std::vector<double>& y);

// Row-major rows of width d as an [n, d] float64 tensor.
torch::Tensor ToTensor(const std::vector<std::vector<double>>& x, int64_t d);

// Matern-5/2 with per-dimension lengthscales `ls` [d] and `outputscale`.
torch::Tensor Matern52(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& ls,
                       const torch::Tensor& outputscale);

// Lower Cholesky factor, adding jitter (x10 each try, from 1e-9 of the mean
// diagonal) until it succeeds. Sets `jitter` to the jitter used, or -1 (and
// returns an undefined tensor) when even 0.1 x the mean diagonal fails.
torch::Tensor RobustCholesky(const torch::Tensor& k, double* jitter);

}  // namespace hilnas::internal

#endif  // HILNAS_LATENCY_MODEL_INTERNAL_GP_KERNEL_H_
