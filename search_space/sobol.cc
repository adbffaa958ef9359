#include "search_space/sobol.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <set>

#include "absl/strings/str_cat.h"

namespace hilnas {
namespace {

// Mirrors torch.quasirandom.SobolEngine (scrambled): Owen-style random linear
// matrix scramble plus a digital shift, both from a seeded generator.
class SobolEngine {
 public:
  static constexpr int64_t kMaxBit = 30;  // torch's SobolEngine.MAXBIT

  SobolEngine(int64_t dimension, uint64_t seed) : dimension_(dimension) {
    state_ = torch::zeros({dimension, kMaxBit}, torch::kLong);
    at::_sobol_engine_initialize_state_(state_, dimension);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    auto bits = torch::randint(2, {dimension, kMaxBit}, gen, torch::kLong);
    auto powers = torch::pow(2, torch::arange(kMaxBit, torch::kLong));
    quasi_ = (bits * powers).sum(-1);
    auto ltm = torch::randint(2, {dimension, kMaxBit, kMaxBit}, gen, torch::kLong).tril();
    at::_sobol_engine_scramble_(state_, ltm, dimension);
  }

  // n x dimension doubles in [0, 1).
  torch::Tensor Draw(int64_t n) {
    std::vector<torch::Tensor> parts;
    if (generated_ == 0) {
      parts.push_back(quasi_.to(torch::kDouble).div(std::pow(2.0, kMaxBit)).reshape({1, -1}));
      --n;
      ++generated_;
    }
    if (n > 0) {
      auto [points, quasi] =
          at::_sobol_engine_draw(quasi_, n, state_, dimension_, generated_, torch::kDouble);
      quasi_ = quasi;
      generated_ += n;
      parts.push_back(points);
    }
    return torch::cat(parts, 0);
  }

 private:
  int64_t dimension_;
  int64_t generated_ = 0;
  torch::Tensor state_;
  torch::Tensor quasi_;
};

}  // namespace

absl::StatusOr<std::vector<std::vector<double>>> SobolPoints(int dimension, int64_t n,
                                                             uint64_t seed) {
  if (dimension < 1 || dimension > 21201) {
    return absl::InvalidArgumentError(
        absl::StrCat("Sobol dimension ", dimension, " is outside 1..21201"));
  }
  try {
    SobolEngine engine(dimension, seed);
    torch::Tensor t = engine.Draw(n).contiguous();
    std::vector<std::vector<double>> out(n, std::vector<double>(dimension));
    const double* p = t.data_ptr<double>();
    for (int64_t i = 0; i < n; ++i)
      std::copy(p + i * dimension, p + (i + 1) * dimension, out[i].begin());
    return out;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("Sobol engine: ", e.what_without_backtrace()));
  }
}

absl::StatusOr<SobolSample> SampleSobol(const Space& space, int n, uint64_t seed,
                                        int64_t max_draws) {
  SobolSample sample;
  if (n <= 0) return sample;
  const int dim = std::max(1, space.dimensions());
  try {
    SobolEngine engine(dim, seed);
    std::set<std::vector<double>> seen;
    while (static_cast<int>(sample.archs.size()) < n && sample.drawn < max_draws) {
      const int64_t batch = std::min<int64_t>(std::max(64, 2 * n), max_draws - sample.drawn);
      torch::Tensor t = engine.Draw(batch).contiguous();
      const double* p = t.data_ptr<double>();
      for (int64_t i = 0; i < batch && static_cast<int>(sample.archs.size()) < n; ++i) {
        ++sample.drawn;
        auto arch = space.Decode(absl::MakeConstSpan(p + i * dim, space.dimensions()));
        if (!arch.ok() || !space.Contains(*arch).ok()) continue;
        auto point = space.Encode(*arch);
        if (!point.ok() || !seen.insert(*point).second) continue;
        sample.points.push_back(*point);
        sample.archs.push_back(*std::move(arch));
      }
    }
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("Sobol engine: ", e.what_without_backtrace()));
  }
  if (static_cast<int>(sample.archs.size()) < n) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "found only ", sample.archs.size(), " distinct feasible architectures of ", n,
        " requested in ", sample.drawn, " Sobol draws (space size ", space.Size(), ")"));
  }
  return sample;
}

}  // namespace hilnas
