#include "pruner/metrics.h"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "model/test_archs.h"
#include "util/status_matchers.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::vector<int32_t> Tokens(int64_t n, int vocab) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i) t[i] = static_cast<int32_t>((i * 7 + i / 5) % vocab);
  return t;
}

torch::Tensor Param(Decoder& d, const std::string& name) {
  for (auto& [n, t] : d.NamedTensors()) {
    if (n == name) return t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return {};
}

CalibrationOptions Small() {
  CalibrationOptions o;
  o.seq_len = 16;
  o.batch_size = 3;
  return o;
}

// Each metric is checked against a construction whose value is known: an
// identity layer, FFN channels that are exactly zero, a residual channel
// every norm zeroes.
TEST(CalibrateTest, MetricsSeeIdentityLayersDeadChannelsAndZeroedNorms) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 3));
  {
    torch::NoGradGuard g;
    // Layer 1 adds nothing to the residual stream: its output is its input.
    Param(d, "model.layers.1.self_attn.o_proj.weight").zero_();
    Param(d, "model.layers.1.mlp.down_proj.weight").zero_();
    // FFN channels 5 and 9 of layer 0 are always 0 (silu(0) * up = 0).
    Param(d, "model.layers.0.mlp.gate_proj.weight")[5].zero_();
    Param(d, "model.layers.0.mlp.gate_proj.weight")[9].zero_();
    // Residual channel 4 leaves every block norm as 0.
    for (auto& [n, t] : d.NamedTensors()) {
      if (n.find("layernorm") != std::string::npos) t[4].zero_();
    }
  }
  ASSERT_OK_AND_ASSIGN(ActivationMetrics m, Calibrate(d, Tokens(200, 50), Small()));
  EXPECT_EQ(m.tokens, 192);  // 12 whole windows of 16
  ASSERT_EQ(m.layer.size(), 4u);
  EXPECT_NEAR(m.layer[1], 0.0, 1e-12);
  for (int l : {0, 2, 3}) EXPECT_GT(m.layer[l], 1e-4) << l;
  EXPECT_EQ(m.ffn[0][5], 0.0);
  EXPECT_EQ(m.ffn[0][9], 0.0);
  EXPECT_GT(m.ffn[0][6], 0.0);
  EXPECT_GT(m.ffn[1][5], 0.0);
  EXPECT_EQ(m.model_dim[4], 0.0);
  EXPECT_GT(m.model_dim[3], 0.0);
  // RMSNorm output with unit weights has mean square 1 per position, so the
  // mean |LN(x)_c| over the surviving channels is near 1.
  double sum = 0;
  for (double v : m.model_dim) sum += v;
  EXPECT_GT(sum / 31, 0.5);
  EXPECT_LT(sum / 31, 1.2);
}

TEST(CalibrateTest, TooFewTokensOrOutOfVocabularyIdsAreRefused) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 3));
  EXPECT_THAT(Calibrate(d, Tokens(10, 50), Small()).status().message(),
              HasSubstr("do not fill one window of 16"));
  auto bad = Tokens(64, 50);
  bad[17] = 50;
  EXPECT_THAT(Calibrate(d, bad, Small()).status().message(),
              HasSubstr("token 50 at position 17 is outside the backbone's vocabulary 50"));
}

TEST(MetricsFileTest, RoundTripsAndRefusesCorruptFiles) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 3));
  ASSERT_OK_AND_ASSIGN(ActivationMetrics m, Calibrate(d, Tokens(64, 50), Small()));
  m.backbone_fingerprint = "0123456789abcdef";
  const fs::path dir = fs::temp_directory_path() / "hilnas_metrics_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "metrics.json").string();
  ASSERT_OK(SaveMetrics(m, path));
  ASSERT_OK_AND_ASSIGN(ActivationMetrics back, LoadMetrics(path));
  EXPECT_EQ(back.ffn, m.ffn);
  EXPECT_EQ(back.model_dim, m.model_dim);
  EXPECT_EQ(back.layer, m.layer);
  EXPECT_EQ(back.backbone_fingerprint, m.backbone_fingerprint);

  std::string text;
  ASSERT_OK(ReadFileToString(path, &text));
  ASSERT_OK(WriteFileAtomically(path, text.substr(0, text.size() / 2)));
  EXPECT_THAT(LoadMetrics(path), testing::StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));

  m.layer.pop_back();
  ASSERT_OK(SaveMetrics(m, path));
  EXPECT_THAT(LoadMetrics(path).status().message(),
              HasSubstr("layer_metric has 3 entries, want 4"));
  fs::remove_all(dir);
}

TEST(MetricsFileTest, MetricsOfAnotherBackboneAreRefused) {
  const fs::path dir = fs::temp_directory_path() / "hilnas_metrics_match";
  fs::remove_all(dir);
  ASSERT_OK_AND_ASSIGN(Decoder a, Decoder::Create(TinyMixedArch(), 1));
  ASSERT_OK_AND_ASSIGN(Decoder b, Decoder::Create(TinyMixedArch(), 2));  // same shape
  ASSERT_OK(SaveCheckpoint(a, (dir / "a").string(), StorageDtype::kF32));
  ASSERT_OK(SaveCheckpoint(b, (dir / "b").string(), StorageDtype::kF32));
  ASSERT_OK_AND_ASSIGN(ActivationMetrics m, Calibrate(a, Tokens(64, 50), Small()));
  ASSERT_OK_AND_ASSIGN(m.backbone_fingerprint, CheckpointFingerprint((dir / "a").string()));
  ASSERT_OK_AND_ASSIGN(auto reader_a, CheckpointReader::Open((dir / "a").string()));
  EXPECT_OK(CheckMetricsMatch(m, "m.json", *reader_a));
  ASSERT_OK_AND_ASSIGN(auto reader_b, CheckpointReader::Open((dir / "b").string()));
  EXPECT_THAT(CheckMetricsMatch(m, "m.json", *reader_b),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("computed on another backbone")));
  Arch wider = a.arch();
  wider.d_ffn = 128;
  ASSERT_OK_AND_ASSIGN(Decoder c, Decoder::Create(wider, 3));
  ASSERT_OK(SaveCheckpoint(c, (dir / "c").string(), StorageDtype::kF32));
  ASSERT_OK_AND_ASSIGN(auto reader_c, CheckpointReader::Open((dir / "c").string()));
  EXPECT_THAT(CheckMetricsMatch(m, "m.json", *reader_c).message(),
              HasSubstr("d_ffn 64 model"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace hilnas
