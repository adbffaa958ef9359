#include "latency_model/latency_model.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "latency_model/dataset.h"
#include "latency_model/metrics.h"
#include "search_space/counts.h"
#include "search_space/sobol.h"
#include "util/status_matchers.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

Space SmallSpace() {
  SearchSpace proto;
  EXPECT_TRUE(
      ReadTextProtoFile(std::string(HILNAS_SOURCE_DIR) + "/configs/small-space.textproto", &proto)
          .ok());
  return *Space::FromProto(proto);
}

// A made-up device: TTFT from FLOPs at 20 GFLOP/s, skip layers 10% cheaper
// than their FLOPs say, 2% multiplicative noise.
std::vector<LatencyRow> SyntheticRows(const Space& space, int n, uint64_t seed) {
  std::vector<LatencyRow> rows;
  auto sample = SampleSobol(space, n, seed);
  EXPECT_TRUE(sample.ok());
  uint64_t state = seed;
  for (const Arch& a : sample->archs) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const double noise = 1 + 0.02 * ((state >> 33) / double(1ULL << 31) - 0.5);
    LatencyRow r;
    r.device = "synthetic";
    r.arch = a;
    r.prompt_tokens = 256;
    r.ttft_ms = PrefillFlops(a, 256) / 20e9 * 1e3 * noise;
    r.ttft_se_ms = 0.01 * r.ttft_ms;
    r.decode_ms = CountParameters(a).model() * 4 / 10e9 * 1e3 * noise;
    r.decode_se_ms = 0.01 * r.decode_ms;
    rows.push_back(r);
  }
  return rows;
}

TEST(LatencyModelTest, FitsAndRanksUnseenArchitectures) {
  const Space space = SmallSpace();
  std::vector<LatencyRow> train = SyntheticRows(space, 60, 1);
  std::vector<LatencyRow> test = SyntheticRows(space, 40, 2);
  ASSERT_OK_AND_ASSIGN(LatencyModel m,
                       LatencyModel::Fit(space, "synthetic", LatencyMetric::kTtft, 256, train));
  std::vector<Arch> archs;
  std::vector<double> truth;
  for (const LatencyRow& r : test) {
    archs.push_back(r.arch);
    truth.push_back(r.ttft_ms);
  }
  ASSERT_OK_AND_ASSIGN(std::vector<LatencyPrediction> p, m.Predict(archs));
  std::vector<double> pred;
  for (const auto& x : p) {
    pred.push_back(x.median_ms);
    EXPECT_LE(x.lower_ms, x.median_ms);
    EXPECT_GE(x.upper_ms, x.median_ms);
  }
  EXPECT_GT(KendallTau(truth, pred), 0.85);
  EXPECT_GT(RSquared(truth, pred), 0.95);
}

// The prior mean is the least-squares line in log FLOPs: on a device whose
// TTFT is proportional to FLOPs the line alone is the truth, and 6 points
// (far fewer than the 14 inputs a GP alone would have to learn) already
// predict unseen architectures.
TEST(LatencyModelTest, TheLogFlopsTrendCarriesSmallDataSets) {
  const Space space = SmallSpace();
  std::vector<LatencyRow> train = SyntheticRows(space, 6, 3);
  for (LatencyRow& r : train) r.ttft_ms = PrefillFlops(r.arch, 256) / 20e9 * 1e3;  // no noise
  ASSERT_OK_AND_ASSIGN(LatencyModel m,
                       LatencyModel::Fit(space, "synthetic", LatencyMetric::kTtft, 256, train));
  for (const LatencyRow& r : train) {
    ASSERT_OK_AND_ASSIGN(std::vector<double> x, m.Features(r.arch));
    EXPECT_NEAR(m.Trend(x), std::log(r.ttft_ms), 1e-6);
  }
  std::vector<Arch> archs;
  std::vector<double> truth, pred;
  for (const LatencyRow& r : SyntheticRows(space, 40, 4)) {
    archs.push_back(r.arch);
    truth.push_back(PrefillFlops(r.arch, 256) / 20e9 * 1e3);
  }
  ASSERT_OK_AND_ASSIGN(std::vector<LatencyPrediction> p, m.Predict(archs));
  for (const auto& x : p) pred.push_back(x.median_ms);
  EXPECT_GT(KendallTau(truth, pred), 0.95);
  ASSERT_OK_AND_ASSIGN(auto draws, m.SampleLogMs(archs, 4, 1));
  for (size_t i = 0; i < archs.size(); ++i) EXPECT_NEAR(draws[0][i], std::log(truth[i]), 0.2);
}

TEST(LatencyModelTest, SaveAndLoadGiveIdenticalPredictions) {
  const Space space = SmallSpace();
  std::vector<LatencyRow> rows = SyntheticRows(space, 30, 3);
  ASSERT_OK_AND_ASSIGN(LatencyModel m,
                       LatencyModel::Fit(space, "synthetic", LatencyMetric::kDecode, 256, rows));
  const std::string path = ::testing::TempDir() + "/latency.model";
  ASSERT_OK(m.Save(path));
  ASSERT_OK_AND_ASSIGN(LatencyModel back, LatencyModel::Load(path, space));
  EXPECT_EQ(back.metric(), LatencyMetric::kDecode);
  std::vector<Arch> archs;
  for (const LatencyRow& r : SyntheticRows(space, 10, 4)) archs.push_back(r.arch);
  ASSERT_OK_AND_ASSIGN(auto a, m.Predict(archs));
  ASSERT_OK_AND_ASSIGN(auto b, back.Predict(archs));
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].median_ms, b[i].median_ms);
    EXPECT_EQ(a[i].log_sd, b[i].log_sd);
  }
}

TEST(LatencyModelTest, RefusesAModelFittedOnAnotherSpace) {
  const Space space = SmallSpace();
  ASSERT_OK_AND_ASSIGN(LatencyModel m, LatencyModel::Fit(space, "synthetic", LatencyMetric::kTtft,
                                                         256, SyntheticRows(space, 20, 5)));
  const std::string path = ::testing::TempDir() + "/latency_other.model";
  ASSERT_OK(m.Save(path));
  ASSERT_OK_AND_ASSIGN(Space other, Space::FromProto(DefaultSearchSpace()));
  EXPECT_THAT(LatencyModel::Load(path, other),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("different search space")));
}

TEST(LatencyModelTest, CorruptModelFileIsRejected) {
  const std::string path = ::testing::TempDir() + "/latency_corrupt.model";
  std::ofstream(path) << "garbage that is not a model";
  EXPECT_THAT(LatencyModel::Load(path, SmallSpace()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("latency_corrupt.model")));
}

TEST(LatencyDatasetTest, RoundTripsThroughCsv) {
  const Space space = SmallSpace();
  std::vector<LatencyRow> rows = SyntheticRows(space, 12, 6);
  const std::string path = ::testing::TempDir() + "/latency.csv";
  ASSERT_OK(WriteLatencyCsv(path, "made by a test\nsecond line", rows));
  ASSERT_OK_AND_ASSIGN(std::vector<LatencyRow> back, ReadLatencyCsv(path, space));
  ASSERT_EQ(back.size(), rows.size());
  EXPECT_EQ(back[3].arch.attention, rows[3].arch.attention);
  EXPECT_EQ(back[3].arch.d_ffn, rows[3].arch.d_ffn);
  EXPECT_NEAR(back[3].ttft_ms, rows[3].ttft_ms, 1e-3);
}

TEST(LatencyDatasetTest, BadRowsNameTheLineAndField) {
  const Space space = SmallSpace();
  const std::string path = ::testing::TempDir() + "/latency_bad.csv";
  std::ofstream(path) << "# comment\n"
                         "device,num_layers,d_model,d_ffn,pattern,prompt_tokens,ttft_ms,"
                         "ttft_se_ms,decode_ms,decode_se_ms\n"
                         "x,4,128,256,FFFF,256,1.0,0.1,0.5,0.01\n"
                         "x,4,128,256,FFFF,256,abc,0.1,0.5,0.01\n";
  EXPECT_THAT(ReadLatencyCsv(path, space),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("latency_bad.csv:4: column 7 \"abc\"")));
  std::ofstream(path) << "device,num_layers,d_model,d_ffn,pattern,prompt_tokens,ttft_ms,"
                         "ttft_se_ms,decode_ms,decode_se_ms\n"
                         "x,4,8192,256,FFFF,256,1.0,0.1,0.5,0.01\n";
  EXPECT_THAT(ReadLatencyCsv(path, space),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not in the search space")));
}

TEST(LatencyDatasetTest, PassesRoundTripMergeAndGiveTheTestRetestCeiling) {
  const Space space = SmallSpace();
  std::vector<LatencyRow> rows = SyntheticRows(space, 20, 6);
  // A second pass: the same architectures, 3% slower and noisier on odd ones.
  const size_t n = rows.size();
  for (size_t i = 0; i < n; ++i) {
    LatencyRow again = rows[i];
    again.pass = 2;
    again.ttft_ms *= i % 2 ? 1.08 : 1.03;
    rows.push_back(again);
  }
  const std::string path = ::testing::TempDir() + "/latency_passes.csv";
  ASSERT_OK(WriteLatencyCsv(path, "two passes", rows));
  ASSERT_OK_AND_ASSIGN(std::vector<LatencyRow> back, ReadLatencyCsv(path, space));
  ASSERT_EQ(back.size(), 2 * n);
  EXPECT_EQ(back[n].pass, 2);

  const RetestAgreement r = TestRetest(
      back, 256, +[](const LatencyRow& row) { return row.ttft_ms; });
  EXPECT_EQ(r.n, static_cast<int>(n));
  EXPECT_NEAR(r.within5, 0.5, 1e-9);  // the even half moved 3%, the odd half 8%
  EXPECT_NEAR(r.within10, 1.0, 1e-9);
  EXPECT_GT(r.r2, 0.9);
  EXPECT_LT(r.r2, 1.0);
  EXPECT_GT(r.tau, 0.8);

  const std::vector<LatencyRow> merged = MergePasses(back);
  ASSERT_EQ(merged.size(), n);  // one row per architecture for the model
  EXPECT_NEAR(merged[0].ttft_ms, back[0].ttft_ms * std::sqrt(1.03), 1e-3 * back[0].ttft_ms);
  EXPECT_NEAR(merged[0].ttft_se_ms, std::sqrt(2.0) * back[0].ttft_se_ms / 2, 1e-3);
  // One pass: nothing to compare, nothing merged.
  const std::vector<LatencyRow> one(back.begin(), back.begin() + n);
  EXPECT_EQ(TestRetest(
                one, 256, +[](const LatencyRow& row) { return row.ttft_ms; })
                .n,
            0);
  EXPECT_EQ(MergePasses(one).size(), n);
}

TEST(LatencyDatasetTest, FilesWithoutThePassColumnStillRead) {
  const Space space = SmallSpace();
  const std::string path = ::testing::TempDir() + "/latency_v1.csv";
  std::ofstream(path) << "device,num_layers,d_model,d_ffn,pattern,prompt_tokens,ttft_ms,"
                         "ttft_se_ms,decode_ms,decode_se_ms\n"
                         "x,4,128,256,FFFF,256,1.0,0.1,0.5,0.01\n";
  ASSERT_OK_AND_ASSIGN(std::vector<LatencyRow> rows, ReadLatencyCsv(path, space));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].pass, 1);
  std::ofstream(path) << "device,num_layers,d_model,d_ffn,pattern,prompt_tokens,ttft_ms,"
                         "ttft_se_ms,decode_ms,decode_se_ms,pass\n"
                         "x,4,128,256,FFFF,256,1.0,0.1,0.5,0.01,0\n";
  EXPECT_THAT(ReadLatencyCsv(path, space).status().message(), HasSubstr("column 11 (pass)"));
}

TEST(LatencyDatasetTest, TheCanaryRatioColumnRoundTripsAndIsChecked) {
  const Space space = SmallSpace();
  std::vector<LatencyRow> rows = SyntheticRows(space, 3, 5);
  rows[1].canary_ratio = 1.04;
  const std::string path = ::testing::TempDir() + "/latency_canary.csv";
  ASSERT_OK(WriteLatencyCsv(path, "", rows));
  ASSERT_OK_AND_ASSIGN(std::vector<LatencyRow> back, ReadLatencyCsv(path, space));
  EXPECT_DOUBLE_EQ(back[0].canary_ratio, 0);
  EXPECT_DOUBLE_EQ(back[1].canary_ratio, 1.04);
  std::ofstream(path) << "device,num_layers,d_model,d_ffn,pattern,prompt_tokens,ttft_ms,"
                         "ttft_se_ms,decode_ms,decode_se_ms,pass,canary_ratio\n"
                         "x,4,128,256,FFFF,256,1.0,0.1,0.5,0.01,1,-2\n";
  EXPECT_THAT(ReadLatencyCsv(path, space).status().message(),
              HasSubstr("column 12 (canary_ratio) \"-2\""));
}

// Device A: TTFT from FLOPs times costs FLOPs do not see: up to 40% more
// with full-attention layers when d_ffn is wide, 25% for an odd layer count.
// Device B: A's law, 1.8x slower and bent (exponent 0.9). With 10 of B's
// points, a model on top of A's predicts B's held-out architectures; one
// from the FLOPs line alone cannot learn those terms from 10 points.
std::vector<LatencyRow> TwoDeviceRows(const Space& space, int n, uint64_t seed, bool device_b) {
  std::vector<LatencyRow> rows = SyntheticRows(space, n, seed);
  for (LatencyRow& r : rows) {
    int full = 0;
    for (Attention t : r.arch.attention) full += t == Attention::kFull;
    double ms = r.ttft_ms * (1 + (r.arch.d_ffn > 384 ? 0.4 * full / r.arch.num_layers : 0)) *
                (r.arch.num_layers % 2 == 1 ? 1.25 : 1.0);
    if (device_b) ms = 1.8 * std::pow(ms, 0.9);
    r.device = device_b ? "device-b" : "device-a";
    r.ttft_ms = ms;
    r.ttft_se_ms = 0.01 * ms;
  }
  return rows;
}

TEST(LatencyModelTest, APriorModelOfAnotherDeviceCarriesTenPoints) {
  const Space space = SmallSpace();
  ASSERT_OK_AND_ASSIGN(LatencyModel a, LatencyModel::Fit(space, "device-a", LatencyMetric::kTtft,
                                                         256, TwoDeviceRows(space, 80, 1, false)));
  const std::vector<LatencyRow> few = TwoDeviceRows(space, 10, 2, true);
  const std::vector<LatencyRow> test = TwoDeviceRows(space, 60, 3, true);
  ASSERT_OK_AND_ASSIGN(LatencyModel alone,
                       LatencyModel::Fit(space, "device-b", LatencyMetric::kTtft, 256, few));
  ASSERT_OK_AND_ASSIGN(
      LatencyModel moved,
      LatencyModel::Fit(space, "device-b", LatencyMetric::kTtft, 256, few, {}, &a));
  ASSERT_NE(moved.prior(), nullptr);
  EXPECT_EQ(moved.feature_names().back(), "log_ms_on_device-a");
  std::vector<Arch> archs;
  std::vector<double> truth;
  for (const LatencyRow& r : test) {
    archs.push_back(r.arch);
    truth.push_back(r.ttft_ms);
  }
  auto r2 = [&](const LatencyModel& m) {
    absl::StatusOr<std::vector<LatencyPrediction>> p = m.Predict(archs);
    EXPECT_TRUE(p.ok()) << p.status();
    std::vector<double> pred;
    for (const LatencyPrediction& x : *p) pred.push_back(x.median_ms);
    return RSquared(truth, pred);
  };
  const double with_prior = r2(moved), without = r2(alone);
  EXPECT_GT(with_prior, 0.97);
  EXPECT_GT(with_prior, without + 0.02) << "without the prior: " << without;
  std::printf("held-out R^2 from 10 points: %.3f alone, %.3f on A's model\n", without, with_prior);

  // The file carries the prior: predictions survive a round trip.
  const std::string path = ::testing::TempDir() + "/device_b.model";
  ASSERT_OK(moved.Save(path));
  ASSERT_OK_AND_ASSIGN(LatencyModel back, LatencyModel::Load(path, space));
  ASSERT_NE(back.prior(), nullptr);
  EXPECT_EQ(back.prior()->device_class(), "device-a");
  EXPECT_NEAR(r2(back), with_prior, 1e-12);

  // A prior of the other metric is refused by name.
  ASSERT_OK_AND_ASSIGN(LatencyModel decode,
                       LatencyModel::Fit(space, "device-a", LatencyMetric::kDecode, 256,
                                         TwoDeviceRows(space, 20, 1, false)));
  EXPECT_THAT(LatencyModel::Fit(space, "device-b", LatencyMetric::kTtft, 256, few, {}, &decode),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("predicts decode")));
}

TEST(LatencyModelTest, PriorModelsNestedTooDeepAreRefused) {
  const Space space = SmallSpace();
  const std::vector<LatencyRow> rows = TwoDeviceRows(space, 8, 1, false);
  ASSERT_OK_AND_ASSIGN(LatencyModel m,
                       LatencyModel::Fit(space, "d0", LatencyMetric::kTtft, 256, rows));
  for (int i = 1; i <= 5; ++i) {
    ASSERT_OK_AND_ASSIGN(
        m, LatencyModel::Fit(space, absl::StrCat("d", i), LatencyMetric::kTtft, 256, rows, {}, &m));
  }
  const std::string path = ::testing::TempDir() + "/deep.model";
  ASSERT_OK(m.Save(path));
  EXPECT_THAT(LatencyModel::Load(path, space),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("nested deeper than 4")));
}

TEST(LatencyMetricsTest, ShareWithinCountsPredictionsInsideTheTolerance) {
  EXPECT_NEAR(ShareWithin({100, 100, 100, 100}, {104, 95, 111, 90}, 0.05), 0.5, 1e-12);
  EXPECT_NEAR(ShareWithin({100, 100, 100, 100}, {104, 95, 111, 90}, 0.10), 0.75, 1e-12);
}

}  // namespace
}  // namespace hilnas
