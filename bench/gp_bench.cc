// How long the GP latency model takes at the sizes the search uses:
// fitting on 800 measured architectures (MobileLLM-Flash Sec. 3.4 fits
// ~800) and predicting 10,000 candidates, reported beside a reference
// measured in the same run (one 800x800 float64 Cholesky).
//
// usage: gp_bench [--n 800] [--candidates 10000] [--restarts 3] [--threads 2]
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "latency_model/gp.h"

int main(int argc, char** argv) {
  int n = 800, m = 10000, restarts = 3, threads = 2, d = 30;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--n")) n = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--candidates")) m = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--restarts")) restarts = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--threads")) threads = std::stoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dims")) d = std::stoi(argv[i + 1]);
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
  hilnas::GpData data;
  data.x = draw(n);
  for (const auto& row : data.x) {
    double y = 0;
    for (int j = 0; j < d; ++j) y += std::sin(3 * row[j]) / (1 + j);
    data.y.push_back(y + 0.01 * u(rng));
  }
  auto a = torch::randn({n, n}, torch::kFloat64);
  auto spd = a.matmul(a.t()) + n * torch::eye(n, torch::kFloat64);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) torch::linalg_cholesky(spd);
  const double chol_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 5;

  hilnas::GpOptions o;
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
  return 0;
}
