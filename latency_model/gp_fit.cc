#include "latency_model/internal/gp_fit.h"

#include <cmath>
#include <limits>
#include <memory>

#include "latency_model/internal/gp_kernel.h"

namespace hilnas::internal {
namespace {

// Location and scale of the dimension-scaled log-normal lengthscale prior
// (Hvarfner et al. 2024): loc sqrt(2) + log(d)/2, scale sqrt(3).
double PriorLoc(int64_t d) { return std::sqrt(2.0) + std::log(static_cast<double>(d)) / 2; }
const double kPriorScale = std::sqrt(3.0);

// One candidate hyperparameter setting and its optimiser.
struct Candidate {
  torch::Tensor log_ls, log_os, log_noise;
  std::unique_ptr<torch::optim::Adam> opt;
  double lml = -std::numeric_limits<double>::infinity();
  bool failed = false;
};

// Gives `c` these starting values (optimised in place) and an Adam.
void Start(Candidate& c, torch::Tensor log_ls, torch::Tensor log_os, torch::Tensor log_noise,
           double lr) {
  c.log_ls = log_ls.set_requires_grad(true);
  c.log_os = log_os.set_requires_grad(true);
  c.log_noise = log_noise.set_requires_grad(true);
  c.opt = std::make_unique<torch::optim::Adam>(
      std::vector<torch::Tensor>{c.log_ls, c.log_os, c.log_noise}, torch::optim::AdamOptions(lr));
}

// `steps` Adam steps on the negative log posterior of `c` given `p`. A step
// that leaves the positive-definite region marks `c` failed and keeps the
// last good value.
void Run(Candidate& c, int steps, const GpProblem& p, const GpOptions& o) {
  const int64_t n = p.x.size(0), d = p.x.size(1);
  for (int step = 0; step < steps && !c.failed; ++step) {
    torch::AutoGradMode grad(true);
    c.opt->zero_grad();
    torch::Tensor lml = LogMarginalLikelihood(p, c.log_ls, c.log_os, c.log_noise, o.min_noise);
    if (!lml.defined()) {
      c.failed = true;
      break;
    }
    auto loss = -(lml + LogLengthscalePrior(c.log_ls, d, o.dimension_scaled_prior)) / n;
    loss.backward();
    c.opt->step();
    c.lml = lml.item<double>();
  }
}

}  // namespace

torch::Tensor LogMarginalLikelihood(const GpProblem& p, const torch::Tensor& log_ls,
                                    const torch::Tensor& log_os, const torch::Tensor& log_noise,
                                    double min_noise) {
  const int64_t n = p.x.size(0);
  auto noise = log_noise.exp() + min_noise + p.known;
  auto k = Matern52(p.x, p.x, log_ls.exp(), log_os.exp()) + torch::diag(noise);
  auto [l, info] = torch::linalg_cholesky_ex(k);
  if (info.item<int64_t>() != 0) return torch::Tensor();
  auto alpha = torch::cholesky_solve(p.ys, l);
  return -0.5 * (p.ys * alpha).sum() - l.diagonal().log().sum() - 0.5 * n * std::log(2 * M_PI);
}

torch::Tensor LogLengthscalePrior(const torch::Tensor& log_ls, int64_t d,
                                  bool dimension_scaled_prior) {
  if (dimension_scaled_prior) {
    return (-(log_ls - PriorLoc(d)).pow(2) / (2 * kPriorScale * kPriorScale) - log_ls).sum();
  }
  return (2 * log_ls - 6 * log_ls.exp()).sum();  // Gamma(3, 6) on the lengthscale
}

absl::StatusOr<FittedHyperparameters> FitHyperparameters(const GpProblem& all,
                                                         const GpOptions& o) {
  const int64_t n = all.x.size(0), d = all.x.size(1);
  torch::manual_seed(o.seed);
  // Hyperparameters are fitted on a seeded subset when there are many
  // points (GpOptions::max_fit_points) and polished on all of them.
  GpProblem fit = all;
  const bool subset = o.max_fit_points > 0 && n > o.max_fit_points;
  if (subset) {
    auto pick = torch::randperm(n, torch::TensorOptions().dtype(torch::kLong))
                    .slice(0, 0, o.max_fit_points);
    fit = {all.x.index_select(0, pick), all.ys.index_select(0, pick),
           all.known.index_select(0, pick)};
  }
  // Every restart gets a fifth of the steps; the best continues for the
  // rest. Fitting 800 points stays in seconds (bench/gp_bench).
  std::vector<Candidate> candidates(std::max(1, o.restarts));
  const int first_steps = candidates.size() > 1 ? std::max(1, o.steps / 5) : o.steps;
  for (size_t r = 0; r < candidates.size(); ++r) {
    // The first starts at the prior's mode; the others are jittered.
    auto log_ls = torch::full(
        {d}, o.dimension_scaled_prior ? PriorLoc(d) - kPriorScale * kPriorScale : std::log(0.5),
        kF64);
    if (r > 0) log_ls = log_ls + torch::randn({d}, kF64);
    Start(candidates[r], log_ls, torch::zeros({1}, kF64),
          torch::full({1}, std::log(r == 0 ? 1e-2 : 1e-1), kF64), o.learning_rate);
    Run(candidates[r], first_steps, fit, o);
  }
  Candidate* best = nullptr;
  for (Candidate& c : candidates) {
    if (std::isfinite(c.lml) && (best == nullptr || c.lml > best->lml)) best = &c;
  }
  if (best == nullptr) {
    return absl::InternalError("GP fit: no restart reached a positive-definite kernel");
  }
  if (candidates.size() > 1) Run(*best, o.steps - first_steps, fit, o);
  if (subset) {
    Candidate polished;
    // Copies, so a failed polish leaves the subset fit intact.
    Start(polished, best->log_ls.detach().clone(), best->log_os.detach().clone(),
          best->log_noise.detach().clone(), o.learning_rate / 2);
    Run(polished, std::max(1, o.polish_steps), all, o);
    // A polish that fails keeps the subset's fit (its lml is the subset's).
    if (!polished.failed && std::isfinite(polished.lml)) *best = std::move(polished);
  }
  FittedHyperparameters out;
  const torch::Tensor ls = best->log_ls.detach().exp().contiguous();
  out.h.lengthscales.assign(ls.data_ptr<double>(), ls.data_ptr<double>() + d);
  out.h.outputscale = best->log_os.detach().exp().item<double>();
  out.h.noise = best->log_noise.detach().exp().item<double>() + o.min_noise;
  out.lml = best->lml;
  return out;
}

}  // namespace hilnas::internal
