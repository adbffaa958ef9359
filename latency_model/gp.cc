#include "latency_model/gp.h"

#include <torch/torch.h>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "latency_model/internal/gp_fit.h"
#include "latency_model/internal/gp_kernel.h"

namespace hilnas {

struct ExactGp::State {
  torch::Tensor x;      // [n, d]
  torch::Tensor chol;   // [n, n] lower Cholesky of K + noise
  torch::Tensor alpha;  // [n, 1] (K + noise)^-1 y_std
  torch::Tensor ls;     // [d]
};

namespace {

using internal::kF64;
using internal::Matern52;
using internal::RobustCholesky;
using internal::Standardisation;
using internal::ToTensor;

// The usable rows of `input`: rows with a NaN or infinite y (or y_var) are
// dropped and counted in `dropped`. INVALID_ARGUMENT for ragged rows,
// non-finite inputs, or fewer than 2 usable points.
absl::StatusOr<GpData> UsableRows(const GpData& input, int* dropped) {
  const size_t n_in = input.y.size();
  if (input.x.size() != n_in || (!input.y_var.empty() && input.y_var.size() != n_in)) {
    return absl::InvalidArgumentError(absl::StrCat("GP data: ", input.x.size(), " inputs, ", n_in,
                                                   " outputs, ", input.y_var.size(),
                                                   " variances; they must match"));
  }
  const size_t d = input.x.empty() ? 0 : input.x[0].size();
  GpData out;
  for (size_t i = 0; i < n_in; ++i) {
    if (input.x[i].size() != d) {
      return absl::InvalidArgumentError(
          absl::StrCat("GP data: row ", i, " has ", input.x[i].size(), " inputs, row 0 has ", d));
    }
    for (double v : input.x[i]) {
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat("GP data: row ", i, " has input ", v));
      }
    }
    const bool bad =
        !std::isfinite(input.y[i]) ||
        (!input.y_var.empty() && (!std::isfinite(input.y_var[i]) || input.y_var[i] < 0));
    if (bad) {
      ++*dropped;
      continue;
    }
    out.x.push_back(input.x[i]);
    out.y.push_back(input.y[i]);
    if (!input.y_var.empty()) out.y_var.push_back(input.y_var[i]);
  }
  if (out.y.size() < 2 || d == 0) {
    return absl::InvalidArgumentError(absl::StrCat("GP data: ", out.y.size(),
                                                   " usable points of dimension ", d, " (",
                                                   *dropped, " dropped as NaN); need at least 2"));
  }
  return out;
}

}  // namespace

absl::StatusOr<ExactGp> ExactGp::Fit(const GpData& input, const GpOptions& o) {
  ExactGp gp;
  absl::StatusOr<GpData> rows = UsableRows(input, &gp.dropped_);
  if (!rows.ok()) return rows.status();
  gp.data_ = *std::move(rows);
  const int64_t n = gp.data_.y.size(), d = gp.data_.x[0].size();
  try {
    torch::NoGradGuard outer;
    std::tie(gp.y_mean_, gp.y_std_) = Standardisation(gp.data_.y);
    internal::GpProblem problem;
    problem.x = ToTensor(gp.data_.x, d);
    problem.ys = ((torch::tensor(gp.data_.y, kF64) - gp.y_mean_) / gp.y_std_).unsqueeze(1);
    problem.known = gp.data_.y_var.empty()
                        ? torch::zeros({n}, kF64)
                        : torch::tensor(gp.data_.y_var, kF64) / (gp.y_std_ * gp.y_std_);
    absl::StatusOr<internal::FittedHyperparameters> fitted =
        internal::FitHyperparameters(problem, o);
    if (!fitted.ok()) return fitted.status();
    gp.h_ = fitted->h;
    gp.lml_ = fitted->lml;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("GP fit: ", e.what_without_backtrace()));
  }
  absl::Status s = gp.Prepare();
  if (!s.ok()) return s;
  return gp;
}

absl::StatusOr<ExactGp> ExactGp::FromParts(const GpData& data, const GpHyperparameters& h) {
  ExactGp gp;
  gp.data_ = data;
  gp.h_ = h;
  const size_t n = data.y.size();
  if (n < 2 || data.x.size() != n || (!data.y_var.empty() && data.y_var.size() != n) ||
      data.x[0].size() != h.lengthscales.size()) {
    return absl::InvalidArgumentError(absl::StrCat("GP parts: ", data.x.size(), " inputs, ", n,
                                                   " outputs, ", h.lengthscales.size(),
                                                   " lengthscales do not fit together"));
  }
  std::tie(gp.y_mean_, gp.y_std_) = Standardisation(data.y);
  absl::Status s = gp.Prepare();
  if (!s.ok()) return s;
  return gp;
}

absl::Status ExactGp::Prepare() {
  try {
    torch::NoGradGuard guard;
    const int64_t n = data_.y.size(), d = data_.x[0].size();
    state_ = std::make_shared<State>();
    state_->x = ToTensor(data_.x, d);
    state_->ls = torch::tensor(h_.lengthscales, kF64);
    auto ys = ((torch::tensor(data_.y, kF64) - y_mean_) / y_std_).unsqueeze(1);
    auto noise = torch::full({n}, h_.noise, kF64);
    if (!data_.y_var.empty()) noise = noise + torch::tensor(data_.y_var, kF64) / (y_std_ * y_std_);
    auto k = Matern52(state_->x, state_->x, state_->ls, torch::tensor(h_.outputscale, kF64)) +
             torch::diag(noise);
    state_->chol = RobustCholesky(k, &jitter_);
    if (jitter_ < 0) {
      return absl::InternalError(
          "GP: kernel matrix is not positive definite even with jitter 0.1 x mean diagonal");
    }
    state_->alpha = torch::cholesky_solve(ys, state_->chol);
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("GP: ", e.what_without_backtrace()));
  }
  return absl::OkStatus();
}

absl::StatusOr<GpPosterior> ExactGp::Posterior(const std::vector<std::vector<double>>& x) const {
  const int64_t d = state_->ls.size(0);
  for (size_t i = 0; i < x.size(); ++i) {
    if (static_cast<int64_t>(x[i].size()) != d) {
      return absl::InvalidArgumentError(
          absl::StrCat("GP posterior: point ", i, " has ", x[i].size(), " inputs, model has ", d));
    }
  }
  GpPosterior p;
  if (x.empty()) return p;
  try {
    torch::NoGradGuard guard;
    auto os = torch::tensor(h_.outputscale, kF64);
    auto xs = ToTensor(x, d);
    // Batches of 4096 keep the cross-covariance small for 10^4+ candidates.
    for (int64_t start = 0; start < xs.size(0); start += 4096) {
      auto xb = xs.narrow(0, start, std::min<int64_t>(4096, xs.size(0) - start));
      auto ks = Matern52(xb, state_->x, state_->ls, os);  // [m, n]
      auto mean = ks.matmul(state_->alpha).squeeze(1) * y_std_ + y_mean_;
      auto v = torch::linalg_solve_triangular(state_->chol, ks.t(), /*upper=*/false);
      auto var = (h_.outputscale - v.pow(2).sum(0)).clamp_min(1e-12) * (y_std_ * y_std_);
      p.mean.insert(p.mean.end(), mean.data_ptr<double>(), mean.data_ptr<double>() + mean.numel());
      p.variance.insert(p.variance.end(), var.data_ptr<double>(),
                        var.data_ptr<double>() + var.numel());
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("GP posterior: ", e.what_without_backtrace()));
  }
  return p;
}

absl::StatusOr<std::vector<std::vector<double>>> ExactGp::Samples(
    const std::vector<std::vector<double>>& x, int n, uint64_t seed) const {
  const int64_t d = state_->ls.size(0);
  for (const auto& row : x) {
    if (static_cast<int64_t>(row.size()) != d) {
      return absl::InvalidArgumentError(
          absl::StrCat("GP samples: a point has ", row.size(), " inputs, model has ", d));
    }
  }
  std::vector<std::vector<double>> out;
  try {
    torch::NoGradGuard guard;
    auto os = torch::tensor(h_.outputscale, kF64);
    auto xs = ToTensor(x, d);
    auto ks = Matern52(xs, state_->x, state_->ls, os);
    auto mean = ks.matmul(state_->alpha).squeeze(1);
    auto v = torch::linalg_solve_triangular(state_->chol, ks.t(), false);
    auto cov = Matern52(xs, xs, state_->ls, os) - v.t().matmul(v);
    double jitter = 0;
    auto l = RobustCholesky(0.5 * (cov + cov.t()), &jitter);
    if (jitter < 0) return absl::InternalError("GP samples: posterior covariance not PSD");
    auto gen = at::detail::createCPUGenerator(seed);
    auto z = at::normal(0.0, 1.0, {static_cast<int64_t>(x.size()), n}, gen).to(kF64);
    auto draws = (mean.unsqueeze(1) + l.matmul(z)).t() * y_std_ + y_mean_;  // [n, m]
    auto a = draws.contiguous();
    for (int i = 0; i < n; ++i) {
      out.emplace_back(a[i].data_ptr<double>(), a[i].data_ptr<double>() + x.size());
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("GP samples: ", e.what_without_backtrace()));
  }
  return out;
}

}  // namespace hilnas
