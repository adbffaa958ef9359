#include "quality/evaluator.h"

#include <cmath>
#include <filesystem>

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

fs::path Fresh(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(ExternalEvaluatorTest, RunsTheUsersCommandAndReadsItsJson) {
  const fs::path d = Fresh("hilnas_eval_ext");
  // The "cluster job": records which checkpoint it got and reports a loss.
  auto eval = NewExternalCommandEvaluator(
      "echo {checkpoint} > " + (d / "seen").string() +
          " && printf '{\"loss\": 2.5, \"tokens\": 1000, \"seconds\": 3}' > {output}",
      10);
  ASSERT_OK_AND_ASSIGN(QualityResult q, eval->Evaluate("/ckpt/trial-7", (d / "w").string()));
  EXPECT_EQ(q.loss, 2.5);
  EXPECT_EQ(q.tokens, 1000);
  EXPECT_TRUE(std::isnan(q.initial_loss));
  std::string seen;
  ASSERT_OK(ReadFileToString((d / "seen").string(), &seen));
  EXPECT_EQ(seen, "/ckpt/trial-7\n");
  fs::remove_all(d);
}

// A campaign's tasks reach the user's command as `hilnas train` flags, at
// the deployment precision; its "tasks" come back with the loss.
TEST(ExternalEvaluatorTest, PassesTaskFlagsAndReadsTheScores) {
  const fs::path d = Fresh("hilnas_eval_ext_tasks");
  ASSERT_OK_AND_ASSIGN(std::string flags,
                       TaskFlags({"/data/tasks/piqa.textproto", "/data/tasks/arc_e.textproto"}, 50,
                                 "q4_0", "q8_0"));
  EXPECT_EQ(flags,
            " --task /data/tasks/piqa.textproto --task /data/tasks/arc_e.textproto --task-limit 50"
            " --task-weight-dtype q4_0 --task-kv-dtype q8_0");
  auto eval = NewExternalCommandEvaluator(
      "echo x{task_flags} > " + (d / "flags").string() +
          " && printf '{\"loss\": 2.5, \"tasks\": [{\"task\": \"piqa\", \"metric\": "
          "\"acc\", \"value\": 0.6, \"n\": 50}]}' > {output}",
      10, flags);
  ASSERT_OK_AND_ASSIGN(QualityResult q, eval->Evaluate("/ckpt/trial-7", (d / "w").string()));
  ASSERT_EQ(q.tasks.size(), 1u);
  EXPECT_EQ(q.tasks[0].value, 0.6);
  std::string seen;
  ASSERT_OK(ReadFileToString((d / "flags").string(), &seen));
  EXPECT_EQ(seen, "x" + flags + "\n");
  // No tasks, no flags; a path a shell would read as more than a word is refused.
  EXPECT_EQ(TaskFlags({}, 0, "q4_0", "").value_or("?"), "");
  EXPECT_THAT(TaskFlags({"/data/x.textproto; rm -rf ~"}, 0, "", ""),
              testing::StatusIs(absl::StatusCode::kInvalidArgument,
                                HasSubstr("only letters, digits and / . _ -")));
  fs::remove_all(d);
}

TEST(ExternalEvaluatorTest, MissingOrBadResultsFailingCommandsAndTimeoutsAreErrors) {
  const fs::path d = Fresh("hilnas_eval_ext_bad");
  const std::string w = (d / "w").string();
  EXPECT_THAT(NewExternalCommandEvaluator("true", 10)->Evaluate("c", w),
              testing::StatusIs(absl::StatusCode::kNotFound, HasSubstr("wrote no")));
  EXPECT_THAT(
      NewExternalCommandEvaluator("printf '{\"loss\": \"high\"}' > {output}", 10)->Evaluate("c", w),
      testing::StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("quality.json")));
  EXPECT_THAT(NewExternalCommandEvaluator("exit 3", 10)->Evaluate("c", w).status().message(),
              HasSubstr("exited with 3"));
  EXPECT_THAT(NewExternalCommandEvaluator("sleep 5", 0.3)->Evaluate("c", w),
              testing::StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("timed out")));
  EXPECT_THAT(NewExternalCommandEvaluator("run {ckpt}", 10)->Evaluate("c", w).status().message(),
              HasSubstr("unknown placeholder {ckpt}"));
  fs::remove_all(d);
}

TEST(InProcessEvaluatorTest, TrainsACopyAndReportsHeldOutLoss) {
  const fs::path d = Fresh("hilnas_eval_inproc");
  ASSERT_OK_AND_ASSIGN(Decoder model, Decoder::Create(TinyMixedArch(), 2));
  ASSERT_OK(SaveCheckpoint(model, (d / "ckpt").string(), StorageDtype::kF32));
  std::vector<int32_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * i) % 23);
  auto data = std::make_shared<TokenSplit>(*SplitTokens(ids, 0.1, 64));
  TrainOptions o;
  o.steps = 25;
  o.batch_size = 4;
  o.seq_len = 32;
  o.lr = 1e-2;
  o.warmup_steps = 3;
  o.eval_windows = 8;
  auto eval = NewInProcessEvaluator(data, o);
  ASSERT_OK_AND_ASSIGN(QualityResult q,
                       eval->Evaluate((d / "ckpt").string(), (d / "work").string()));
  EXPECT_LT(q.loss, q.initial_loss - 0.5);
  EXPECT_EQ(q.tokens, 25 * 4 * 32);
  EXPECT_TRUE(fs::exists(d / "work" / "train" / "resume" / "state.json"));
  // The checkpoint under evaluation is left as it was.
  ASSERT_OK_AND_ASSIGN(Decoder again, LoadCheckpoint((d / "ckpt").string()));
  EXPECT_TRUE(torch::equal(again.NamedTensors()[1].second, model.NamedTensors()[1].second));

  // Scored at deployment precision: the same training (same seed, fresh
  // work folder) scored after Q4_0 quantization moves the loss, a little.
  o.eval_weight_dtype = "q4_0";
  ASSERT_OK_AND_ASSIGN(QualityResult q4, NewInProcessEvaluator(data, o)->Evaluate(
                                             (d / "ckpt").string(), (d / "work-q4").string()));
  EXPECT_NE(q4.loss, q.loss);
  EXPECT_NEAR(q4.loss, q.loss, 0.25);
  fs::remove_all(d);
}

}  // namespace
}  // namespace hilnas
