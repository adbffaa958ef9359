// How long the GP latency model takes at the sizes the search uses:
// fitting on 800 measured architectures (MobileLLM-Flash Sec. 3.4 fits
// ~800) and predicting 10,000 candidates, reported beside a reference
// measured in the same run (one 800x800 float64 Cholesky).
//
// Hyperparameters are fitted on a 300-point subset and polished on all
// points (GpOptions::max_fit_points); --compare-full also fits on all
// points throughout and reports both fits' held-out RMSE on 2,000 points.
//
// usage: gp_bench [--n 800] [--candidates 10000] [--restarts 3] [--threads 2]
//                 [--subset 300] [--polish 30] [--compare-full 1]
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "latency_model/gp.h"

namespace gp_bench_main {  // one of hilnas-bench's programs (bench/benches.h)

int Main(int argc, char** argv) {
  int n = 800, m = 10000, restarts = 3, threads = 2, d = 30, compare_full = 0;
  hilnas::GpOptions o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--n")) n = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--candidates")) m = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--restarts")) restarts = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dims")) d = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--compare-full")) compare_full = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--subset")) o.max_fit_points = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--polish")) o.polish_steps = std::stoi(argv[i + 1]);
  }
  at::set_num_threads(threads);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> u(0, 1);
  auto draw = [&](int count) {
    std::vector<std::vector<double>> x(count, std::vector<double>(d));
    for (auto& row : x)
      for (double& v : row) v = u(rng);
    return x;
  };
  auto truth = [&](const std::vector<double>& row) {
    double y = 0;
    for (int j = 0; j < d; ++j) y += std::sin(3 * row[j]) / (1 + j);
    return y;
  };
  hilnas::GpData data;
  data.x = draw(n);
  for (const auto& row : data.x) data.y.push_back(truth(row) + 0.01 * u(rng));
  const auto held_out = draw(2000);
  auto rmse = [&](const hilnas::ExactGp& gp) {
    auto post = gp.Posterior(held_out);
    double se = 0;
    for (size_t i = 0; i < held_out.size(); ++i) {
      se += std::pow(post->mean[i] - truth(held_out[i]), 2);
    }
    return std::sqrt(se / held_out.size());
  };
  auto a = torch::randn({n, n}, torch::kFloat64);
  auto spd = a.matmul(a.t()) + n * torch::eye(n, torch::kFloat64);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) torch::linalg_cholesky(spd);
  const double chol_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5;

  o.restarts = restarts;
  t0 = std::chrono::steady_clock::now();
  auto gp = hilnas::ExactGp::Fit(data, o);
  const double fit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!gp.ok()) {
    std::fprintf(stderr, "%s\n", std::string(gp.status().message()).c_str());
    return 1;
  }
  auto cand = draw(m);
  t0 = std::chrono::steady_clock::now();
  auto post = gp->Posterior(cand);
  const double pred_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("# %d points, %d dims, %d restarts x %d Adam steps, %d threads\n", n, d, restarts,
              o.steps, threads);
  std::printf("| step | seconds | in %dx%d Choleskys (%.2f ms each) |\n|---|---|---|\n", n, n,
              chol_s * 1e3);
  std::printf("| fit | %.2f | %.0f |\n", fit_s, fit_s / chol_s);
  std::printf("| predict %d candidates (mean + variance) | %.2f | %.0f |\n", m, pred_s,
              pred_s / chol_s);
  std::printf("\nheld-out RMSE, fit on a %d-point subset + %d polish steps: %.4f\n",
              o.max_fit_points, o.polish_steps, rmse(*gp));
  if (compare_full) {
    o.max_fit_points = 0;
    t0 = std::chrono::steady_clock::now();
    auto full = hilnas::ExactGp::Fit(data, o);
    const double full_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!full.ok()) return 1;
    std::printf("held-out RMSE, fit on all %d points: %.4f (fit %.2f s, %.1fx the subset fit)\n", n,
                rmse(*full), full_s, full_s / fit_s);
  }
  return 0;
}

}  // namespace gp_bench_main
