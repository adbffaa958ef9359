#include "latency_model/gp.h"

#include <cmath>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "latency_model/metrics.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

double Smooth(const std::vector<double>& x) {
  return std::sin(3 * x[0]) + 0.5 * x[1] * x[1];  // x[2] is irrelevant
}

GpData Draw(int n, uint64_t seed, double noise_sd = 0.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::normal_distribution<double> eps(0, noise_sd > 0 ? noise_sd : 1);
  GpData d;
  for (int i = 0; i < n; ++i) {
    std::vector<double> x = {u(rng), u(rng), u(rng)};
    d.y.push_back(Smooth(x) + (noise_sd > 0 ? eps(rng) : 0));
    d.x.push_back(x);
  }
  return d;
}

TEST(ExactGpTest, RecoversAKnownSmoothFunction) {
  ASSERT_OK_AND_ASSIGN(ExactGp gp, ExactGp::Fit(Draw(60, 1, 0.01)));
  GpData test = Draw(200, 2);
  ASSERT_OK_AND_ASSIGN(GpPosterior p, gp.Posterior(test.x));
  EXPECT_GT(RSquared(test.y, p.mean), 0.98);
  // The irrelevant input gets the longest lengthscale (ARD).
  const auto& ls = gp.hyperparameters().lengthscales;
  EXPECT_GT(ls[2], ls[0]);
  EXPECT_GT(ls[2], ls[1]);
}

TEST(ExactGpTest, PosteriorVarianceShrinksAtObservedPoints) {
  GpData d = Draw(30, 3, 0.01);
  ASSERT_OK_AND_ASSIGN(ExactGp gp, ExactGp::Fit(d));
  ASSERT_OK_AND_ASSIGN(GpPosterior at, gp.Posterior({d.x[0], d.x[1]}));
  ASSERT_OK_AND_ASSIGN(GpPosterior far, gp.Posterior({{3.0, 3.0, 3.0}}));
  EXPECT_LT(at.variance[0], 0.05 * far.variance[0]);
  EXPECT_LT(at.variance[1], 0.05 * far.variance[0]);
}

TEST(ExactGpTest, KnownNoiseLetsTheModelDiscountABadMeasurement) {
  GpData d = Draw(40, 4, 0.01);
  d.y[0] += 3.0;  // one badly measured point...
  GpData told = d;
  told.y_var.assign(d.y.size(), 1e-4);
  told.y_var[0] = 9.0;  // ...that the agent flagged with a large standard error
  ASSERT_OK_AND_ASSIGN(ExactGp naive, ExactGp::Fit(d));
  ASSERT_OK_AND_ASSIGN(ExactGp weighted, ExactGp::Fit(told));
  ASSERT_OK_AND_ASSIGN(GpPosterior pn, naive.Posterior({d.x[0]}));
  ASSERT_OK_AND_ASSIGN(GpPosterior pw, weighted.Posterior({d.x[0]}));
  const double truth = Smooth(d.x[0]);
  EXPECT_LT(std::abs(pw.mean[0] - truth), 0.3);
  EXPECT_LT(std::abs(pw.mean[0] - truth), std::abs(pn.mean[0] - truth));
}

TEST(ExactGpTest, FromPartsGivesIdenticalPredictions) {
  GpData d = Draw(25, 5, 0.05);
  ASSERT_OK_AND_ASSIGN(ExactGp gp, ExactGp::Fit(d));
  ASSERT_OK_AND_ASSIGN(ExactGp again, ExactGp::FromParts(gp.data(), gp.hyperparameters()));
  GpData test = Draw(10, 6);
  ASSERT_OK_AND_ASSIGN(GpPosterior a, gp.Posterior(test.x));
  ASSERT_OK_AND_ASSIGN(GpPosterior b, again.Posterior(test.x));
  EXPECT_EQ(a.mean, b.mean);
  EXPECT_EQ(a.variance, b.variance);
}

TEST(ExactGpTest, DuplicatePointsConstantOutputsAndNaNsAreHandled) {
  GpData dup;
  for (int i = 0; i < 10; ++i) {
    dup.x.push_back({0.5, 0.5});
    dup.y.push_back(1.0 + 0.01 * (i % 2));
  }
  dup.x.push_back({0.1, 0.9});
  dup.y.push_back(2.0);
  ASSERT_OK_AND_ASSIGN(ExactGp gp, ExactGp::Fit(dup));
  ASSERT_OK_AND_ASSIGN(GpPosterior p, gp.Posterior({{0.5, 0.5}}));
  EXPECT_NEAR(p.mean[0], 1.005, 0.05);

  GpData constant;
  for (int i = 0; i < 8; ++i) {
    constant.x.push_back({i / 8.0});
    constant.y.push_back(3.0);
  }
  ASSERT_OK_AND_ASSIGN(ExactGp flat, ExactGp::Fit(constant));
  ASSERT_OK_AND_ASSIGN(GpPosterior q, flat.Posterior({{0.33}}));
  EXPECT_NEAR(q.mean[0], 3.0, 1e-6);

  GpData with_nan = Draw(20, 7, 0.01);
  with_nan.y[3] = std::nan("");
  with_nan.y[5] = INFINITY;
  ASSERT_OK_AND_ASSIGN(ExactGp kept, ExactGp::Fit(with_nan));
  EXPECT_EQ(kept.dropped(), 2);
  EXPECT_EQ(kept.data().y.size(), 18u);
}

TEST(ExactGpTest, BadInputsAreRejectedWithTheirShape) {
  GpData ragged;
  ragged.x = {{0.1, 0.2}, {0.3}};
  ragged.y = {1, 2};
  EXPECT_THAT(ExactGp::Fit(ragged),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("row 1 has 1 inputs")));
  GpData one;
  one.x = {{0.1}};
  one.y = {1};
  EXPECT_THAT(ExactGp::Fit(one),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("need at least 2")));
}

TEST(ExactGpTest, JointSamplesFollowThePosterior) {
  GpData d = Draw(30, 8, 0.01);
  ASSERT_OK_AND_ASSIGN(ExactGp gp, ExactGp::Fit(d));
  std::vector<std::vector<double>> xs = {{0.2, 0.2, 0.2}, {0.21, 0.2, 0.2}, {0.9, 0.1, 0.5}};
  ASSERT_OK_AND_ASSIGN(auto draws, gp.Samples(xs, 2000, 1));
  ASSERT_OK_AND_ASSIGN(GpPosterior p, gp.Posterior(xs));
  for (size_t j = 0; j < xs.size(); ++j) {
    double m = 0;
    for (const auto& s : draws) m += s[j];
    m /= draws.size();
    EXPECT_NEAR(m, p.mean[j], 4 * std::sqrt(p.variance[j] / draws.size()) + 1e-6);
  }
  ASSERT_OK_AND_ASSIGN(auto again, gp.Samples(xs, 2000, 1));
  EXPECT_EQ(draws, again);  // seeded
}

TEST(MetricsTest, KendallTauAndR2OnKnownValues) {
  EXPECT_DOUBLE_EQ(KendallTau({1, 2, 3, 4}, {10, 20, 30, 40}), 1.0);
  EXPECT_DOUBLE_EQ(KendallTau({1, 2, 3, 4}, {4, 3, 2, 1}), -1.0);
  EXPECT_NEAR(KendallTau({1, 2, 3, 4}, {1, 3, 2, 4}), 4.0 / 6.0, 1e-12);
  EXPECT_DOUBLE_EQ(RSquared({1, 2, 3}, {1, 2, 3}), 1.0);
  EXPECT_DOUBLE_EQ(Rmse({1, 2}, {2, 4}), std::sqrt(2.5));
}

TEST(MetricsTest, CrossValidationPredictsEveryPointOutOfFold) {
  GpData d = Draw(40, 9, 0.01);
  GpOptions o;
  o.restarts = 1;
  ASSERT_OK_AND_ASSIGN(GpPosterior cv, CrossValidate(d, 5, o));
  EXPECT_GT(RSquared(d.y, cv.mean), 0.9);
  for (double v : cv.mean) EXPECT_TRUE(std::isfinite(v));
  EXPECT_THAT(CrossValidate(d, 1, o),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1 folds")));
}

}  // namespace
}  // namespace hilnas
