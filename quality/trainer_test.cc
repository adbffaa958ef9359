#include "quality/trainer.h"

#include <torch/torch.h>

#include <cmath>
#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/test_archs.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// A learnable stream: a fixed pseudo-random sequence of period 37 over 50 ids.
TokenSplit PeriodicTokens() {
  std::vector<int32_t> ids(6000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(((i % 37) * 13 + 5) % 50);
  return *SplitTokens(ids, 0.1, 64);
}

TrainOptions Quick() {
  TrainOptions o;
  o.steps = 40;
  o.batch_size = 4;
  o.seq_len = 32;
  o.lr = 1e-2;
  o.warmup_steps = 5;
  o.eval_windows = 8;
  return o;
}

TEST(TrainerTest, LearnsAPeriodicStreamFarBelowChance) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 1));
  std::vector<TrainProgress> seen;
  ASSERT_OK_AND_ASSIGN(TrainResult r, Train(d, nullptr, PeriodicTokens(), Quick(),
                                            [&](const TrainProgress& p) { seen.push_back(p); }));
  EXPECT_NEAR(r.initial_eval_loss, std::log(50.0), 0.3);
  EXPECT_LT(r.final_eval_loss, 0.5 * std::log(50.0));
  EXPECT_EQ(r.tokens, 40 * 4 * 32);
  ASSERT_EQ(seen.size(), 40u);
  EXPECT_GT(seen.back().tokens_per_s, 0);
  EXPECT_FALSE(std::isnan(seen.back().eval_loss));
  // Warm-up then cosine decay to lr * min_lr_ratio.
  EXPECT_NEAR(seen[0].lr, 1e-2 / 5, 1e-12);
  EXPECT_NEAR(seen[4].lr, 1e-2, 1e-12);
  EXPECT_NEAR(seen.back().lr, 1e-3, 1e-12);
}

TEST(TrainerTest, ResumingMidRunEndsWithTheSameWeightsAsAnUninterruptedRun) {
  const fs::path root = fs::temp_directory_path() / "hilnas_trainer_resume";
  fs::remove_all(root);
  TrainOptions o = Quick();
  o.steps = 8;
  o.checkpoint_every = 3;
  o.checkpoint_dir = (root / "full").string();
  ASSERT_OK_AND_ASSIGN(Decoder full, Decoder::Create(TinyMixedArch(), 1));
  // Snapshot the checkpoint written at step 3, as if the run died at step 4.
  ASSERT_OK(Train(full, nullptr, PeriodicTokens(), o, [&](const TrainProgress& p) {
              if (p.step == 3) fs::copy(root / "full", root / "cut", fs::copy_options::recursive);
            }).status());
  o.checkpoint_dir = (root / "cut").string();
  ASSERT_OK_AND_ASSIGN(Decoder resumed, Decoder::Create(TinyMixedArch(), 99));  // other init
  ASSERT_OK_AND_ASSIGN(TrainResult r, Train(resumed, nullptr, PeriodicTokens(), o));
  EXPECT_EQ(r.resumed_from_step, 3);
  EXPECT_EQ(r.tokens, 5 * 4 * 32);
  auto a = full.NamedTensors(), b = resumed.NamedTensors();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::allclose(a[i].second, b[i].second, 1e-6, 1e-7)) << a[i].first;
  }
  // A run with other options must not pick up this checkpoint.
  o.lr = 5e-3;
  EXPECT_THAT(Train(resumed, nullptr, PeriodicTokens(), o),
              testing::StatusIs(absl::StatusCode::kFailedPrecondition,
                                HasSubstr("holds a run with other options")));
  fs::remove_all(root);
}

TEST(TrainerTest, DistillingFromAnIdenticalTeacherStartsAtZeroLoss) {
  ASSERT_OK_AND_ASSIGN(Decoder student, Decoder::Create(TinyMixedArch(), 4));
  ASSERT_OK_AND_ASSIGN(Decoder teacher, Decoder::Create(TinyMixedArch(), 4));
  TrainOptions o = Quick();
  o.steps = 1;
  o.distill_weight = 1;
  std::vector<double> losses;
  ASSERT_OK(Train(student, &teacher, PeriodicTokens(), o, [&](const TrainProgress& p) {
              losses.push_back(p.train_loss);
            }).status());
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_NEAR(losses[0], 0.0, 1e-5);
  // Without a teacher, distillation is refused.
  EXPECT_THAT(Train(student, nullptr, PeriodicTokens(), o).status().message(),
              HasSubstr("needs a teacher"));
}

TEST(TrainerTest, BadOptionsAndTooLittleDataAreNamed) {
  ASSERT_OK_AND_ASSIGN(Decoder d, Decoder::Create(TinyMixedArch(), 1));
  TrainOptions o = Quick();
  o.steps = 0;
  EXPECT_THAT(Train(d, nullptr, PeriodicTokens(), o).status().message(),
              HasSubstr("train option steps = 0"));
  o = Quick();
  o.seq_len = 1000;
  EXPECT_THAT(Train(d, nullptr, PeriodicTokens(), o).status().message(),
              HasSubstr("held-out tokens do not fill one window"));
}

}  // namespace
}  // namespace hilnas
