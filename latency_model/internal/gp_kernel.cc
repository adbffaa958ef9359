#include "latency_model/internal/gp_kernel.h"

#include <cmath>

namespace hilnas::internal {

std::pair<double, double> Standardisation(const std::vector<double>& y) {
  double mean = 0;
  for (double v : y) mean += v;
  mean /= y.size();
  double ss = 0;
  for (double v : y) ss += (v - mean) * (v - mean);
  const double sd = std::sqrt(ss / (y.size() - 1));
  return {mean, sd > 1e-12 ? sd : 1.0};
}

torch::Tensor ToTensor(const std::vector<std::vector<double>>& x, int64_t d) {
  auto t = torch::empty({static_cast<int64_t>(x.size()), d}, kF64);
  auto a = t.accessor<double, 2>();
  for (size_t i = 0; i < x.size(); ++i)
    for (int64_t j = 0; j < d; ++j) a[i][j] = x[i][j];
  return t;
}

// Squared distances through |a|^2 + |b|^2 - 2 a.b (a matrix product), not an
// [n, m, d] broadcast: fitting 800 points went from minutes to seconds
// (bench/gp_bench).
torch::Tensor Matern52(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& ls,
                       const torch::Tensor& outputscale) {
  auto as = a / ls, bs = b / ls;
  auto d2 = as.pow(2).sum(-1, true) + bs.pow(2).sum(-1).unsqueeze(0) - 2 * as.matmul(bs.t());
  auto r = torch::sqrt(d2.clamp_min(1e-30)) * std::sqrt(5.0);
  return outputscale * (1 + r + r.pow(2) / 3.0) * torch::exp(-r);
}

torch::Tensor RobustCholesky(const torch::Tensor& k, double* jitter) {
  auto [l, info] = torch::linalg_cholesky_ex(k);
  if (info.item<int64_t>() == 0) {
    *jitter = 0;
    return l;
  }
  const double scale = k.diagonal().mean().item<double>();
  auto eye = torch::eye(k.size(0), kF64);
  for (double j = 1e-9; j <= 1e-1; j *= 10) {
    std::tie(l, info) = torch::linalg_cholesky_ex(k + eye * (j * scale));
    if (info.item<int64_t>() == 0) {
      *jitter = j * scale;
      return l;
    }
  }
  *jitter = -1;
  return torch::Tensor();
}

}  // namespace hilnas::internal
