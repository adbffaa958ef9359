#include "latency_model/gp.h"

#include <torch/torch.h>

#include <cmath>

#include "absl/strings/str_cat.h"

namespace hilnas {

struct ExactGp::State {
  torch::Tensor x;      // [n, d]
  torch::Tensor chol;   // [n, n] lower Cholesky of K + noise
  torch::Tensor alpha;  // [n, 1] (K + noise)^-1 y_std
  torch::Tensor ls;     // [d]
};

namespace {

constexpr auto kF64 = torch::kFloat64;

// Mean and sample standard deviation (1 for constant outputs, so the GP
// predicts the constant instead of dividing by zero).
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

// Matern-5/2 with per-dimension lengthscales. Squared distances through
// |a|^2 + |b|^2 - 2 a.b (a matrix product), not an [n, m, d] broadcast:
// fitting 800 points went from minutes to seconds (bench/gp_bench).
torch::Tensor Matern52(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& ls,
                       const torch::Tensor& outputscale) {
  auto as = a / ls, bs = b / ls;
  auto d2 = as.pow(2).sum(-1, true) + bs.pow(2).sum(-1).unsqueeze(0) - 2 * as.matmul(bs.t());
  auto r = torch::sqrt(d2.clamp_min(1e-30)) * std::sqrt(5.0);
  return outputscale * (1 + r + r.pow(2) / 3.0) * torch::exp(-r);
}

// Lower Cholesky factor, adding jitter (x10 each try, from 1e-9 of the mean
// diagonal) until it succeeds. Returns the jitter used through `jitter`.
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

}  // namespace

absl::StatusOr<ExactGp> ExactGp::Fit(const GpData& input, const GpOptions& o) {
  ExactGp gp;
  const size_t n_in = input.y.size();
  if (input.x.size() != n_in || (!input.y_var.empty() && input.y_var.size() != n_in)) {
    return absl::InvalidArgumentError(absl::StrCat("GP data: ", input.x.size(), " inputs, ", n_in,
                                                   " outputs, ", input.y_var.size(),
                                                   " variances; they must match"));
  }
  const size_t d = input.x.empty() ? 0 : input.x[0].size();
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
      ++gp.dropped_;
      continue;
    }
    gp.data_.x.push_back(input.x[i]);
    gp.data_.y.push_back(input.y[i]);
    if (!input.y_var.empty()) gp.data_.y_var.push_back(input.y_var[i]);
  }
  const int64_t n = static_cast<int64_t>(gp.data_.y.size());
  if (n < 2 || d == 0) {
    return absl::InvalidArgumentError(absl::StrCat("GP data: ", n, " usable points of dimension ",
                                                   d, " (", gp.dropped_,
                                                   " dropped as NaN); need at least 2"));
  }
  try {
    torch::NoGradGuard outer;
    auto x = ToTensor(gp.data_.x, d);
    auto y = torch::tensor(gp.data_.y, kF64);
    std::tie(gp.y_mean_, gp.y_std_) = Standardisation(gp.data_.y);
    auto ys = ((y - gp.y_mean_) / gp.y_std_).unsqueeze(1);
    auto known = gp.data_.y_var.empty()
                     ? torch::zeros({n}, kF64)
                     : torch::tensor(gp.data_.y_var, kF64) / (gp.y_std_ * gp.y_std_);
    const double loc = std::sqrt(2.0) + std::log(static_cast<double>(d)) / 2;
    const double scale = std::sqrt(3.0);
    torch::manual_seed(o.seed);
    // One candidate hyperparameter setting and its optimiser.
    struct Candidate {
      torch::Tensor log_ls, log_os, log_noise;
      std::unique_ptr<torch::optim::Adam> opt;
      double lml = -std::numeric_limits<double>::infinity();
      bool failed = false;
    };
    // Hyperparameters are fitted on a seeded subset when there are many
    // points (GpOptions::max_fit_points) and polished on all of them.
    torch::Tensor fit_x = x, fit_ys = ys, fit_known = known;
    const bool subset = o.max_fit_points > 0 && n > o.max_fit_points;
    if (subset) {
      auto pick = torch::randperm(n, torch::TensorOptions().dtype(torch::kLong))
                      .slice(0, 0, o.max_fit_points);
      fit_x = x.index_select(0, pick);
      fit_ys = ys.index_select(0, pick);
      fit_known = known.index_select(0, pick);
    }
    // Runs `steps` Adam steps on the negative log posterior of `c` given
    // inputs x, standardised outputs ys and known noise.
    auto run = [&](Candidate& c, int steps, const torch::Tensor& x, const torch::Tensor& ys,
                   const torch::Tensor& known) {
      const int64_t n = x.size(0);
      for (int step = 0; step < steps && !c.failed; ++step) {
        torch::AutoGradMode grad(true);
        c.opt->zero_grad();
        auto ls = c.log_ls.exp();
        auto noise = c.log_noise.exp() + o.min_noise + known;
        auto k = Matern52(x, x, ls, c.log_os.exp()) + torch::diag(noise);
        auto [l, info] = torch::linalg_cholesky_ex(k);
        if (info.item<int64_t>() != 0) {  // wandered off: keep the last good value
          c.failed = true;
          break;
        }
        auto alpha = torch::cholesky_solve(ys, l);
        auto lml =
            -0.5 * (ys * alpha).sum() - l.diagonal().log().sum() - 0.5 * n * std::log(2 * M_PI);
        torch::Tensor log_prior;
        if (o.dimension_scaled_prior) {
          log_prior = (-(c.log_ls - loc).pow(2) / (2 * scale * scale) - c.log_ls).sum();
        } else {  // Gamma(3, 6) on the lengthscale
          log_prior = (2 * c.log_ls - 6 * ls).sum();
        }
        auto loss = -(lml + log_prior) / n;
        loss.backward();
        c.opt->step();
        c.lml = lml.item<double>();
      }
    };
    // Gives `c` these starting values (optimised in place) and an Adam.
    auto start = [](Candidate& c, torch::Tensor log_ls, torch::Tensor log_os,
                    torch::Tensor log_noise, double lr) {
      c.log_ls = log_ls.set_requires_grad(true);
      c.log_os = log_os.set_requires_grad(true);
      c.log_noise = log_noise.set_requires_grad(true);
      c.opt = std::make_unique<torch::optim::Adam>(
          std::vector<torch::Tensor>{c.log_ls, c.log_os, c.log_noise},
          torch::optim::AdamOptions(lr));
    };
    // Every restart gets a fifth of the steps; the best continues for the
    // rest. Fitting 800 points stays in seconds (bench/gp_bench).
    std::vector<Candidate> candidates(std::max(1, o.restarts));
    for (size_t r = 0; r < candidates.size(); ++r) {
      Candidate& c = candidates[r];
      // The first starts at the prior's mode; the others are jittered.
      auto log_ls =
          torch::full({static_cast<int64_t>(d)},
                      o.dimension_scaled_prior ? loc - scale * scale : std::log(0.5), kF64);
      if (r > 0) log_ls = log_ls + torch::randn({static_cast<int64_t>(d)}, kF64);
      start(c, log_ls, torch::zeros({1}, kF64),
            torch::full({1}, std::log(r == 0 ? 1e-2 : 1e-1), kF64), o.learning_rate);
      run(c, candidates.size() > 1 ? std::max(1, o.steps / 5) : o.steps, fit_x, fit_ys, fit_known);
    }
    Candidate* best_c = nullptr;
    for (Candidate& c : candidates) {
      if (std::isfinite(c.lml) && (best_c == nullptr || c.lml > best_c->lml)) best_c = &c;
    }
    if (best_c == nullptr) {
      return absl::InternalError("GP fit: no restart reached a positive-definite kernel");
    }
    if (candidates.size() > 1) {
      run(*best_c, o.steps - std::max(1, o.steps / 5), fit_x, fit_ys, fit_known);
    }
    if (subset) {
      Candidate polished;
      // Copies, so a failed polish leaves the subset fit intact.
      start(polished, best_c->log_ls.detach().clone(), best_c->log_os.detach().clone(),
            best_c->log_noise.detach().clone(), o.learning_rate / 2);
      run(polished, std::max(1, o.polish_steps), x, ys, known);
      // A polish that fails keeps the subset's fit (its lml is the subset's).
      if (!polished.failed && std::isfinite(polished.lml)) *best_c = std::move(polished);
    }
    const double best = best_c->lml;
    const torch::Tensor ls = best_c->log_ls.detach().exp().contiguous();
    gp.h_.lengthscales.assign(ls.data_ptr<double>(), ls.data_ptr<double>() + d);
    gp.h_.outputscale = best_c->log_os.detach().exp().item<double>();
    gp.h_.noise = best_c->log_noise.detach().exp().item<double>() + o.min_noise;
    gp.lml_ = best;
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
