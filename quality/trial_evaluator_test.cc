#include "quality/trial_evaluator.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;
using Kind = EvaluationStatus::Kind;

// Blocks every evaluation until released; the loss is the checkpoint's length.
class GatedEvaluator : public QualityEvaluator {
 public:
  absl::StatusOr<QualityResult> Evaluate(const std::string& checkpoint_dir,
                                         const std::string&) override {
    release.WaitForNotification();
    if (checkpoint_dir == "bad") return absl::InternalError("the trainer diverged");
    QualityResult q;
    q.loss = static_cast<double>(checkpoint_dir.size());
    return q;
  }
  absl::Notification release;
};

EvaluationStatus PollUntilEnded(TrialEvaluator& e, const EvaluationTask& t, const std::string& h) {
  for (int i = 0; i < 2000; ++i) {
    absl::StatusOr<EvaluationStatus> s = e.Poll(t, h);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok() || (s->kind != Kind::kRunning && s->kind != Kind::kQueued)) return *s;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "never ended";
  return {};
}

TEST(ConcurrentEvaluatorTest, RunsUpToCapacityAtOnceAndReportsEachResult) {
  auto gated = std::make_shared<GatedEvaluator>();
  auto e = NewConcurrentEvaluator(gated, 2);
  EvaluationTask a{"c", 1, 1, "abc", ""}, b{"c", 2, 1, "bad", ""}, c{"c", 3, 1, "x", ""};
  ASSERT_OK_AND_ASSIGN(std::string ha, e->Submit(a));
  ASSERT_OK_AND_ASSIGN(std::string hb, e->Submit(b));
  EXPECT_NE(ha, hb);
  EXPECT_THAT(e->Submit(c), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("2")));
  ASSERT_OK_AND_ASSIGN(EvaluationStatus running, e->Poll(a, ha));
  EXPECT_EQ(running.kind, Kind::kRunning);
  gated->release.Notify();
  EvaluationStatus done = PollUntilEnded(*e, a, ha);
  EXPECT_EQ(done.kind, Kind::kDone);
  EXPECT_EQ(done.result.loss, 3);
  EvaluationStatus failed = PollUntilEnded(*e, b, hb);
  EXPECT_EQ(failed.kind, Kind::kFailed);
  EXPECT_THAT(failed.message, HasSubstr("diverged"));
  // Slots free again once results are collected.
  ASSERT_OK(e->Submit(c).status());
}

TEST(ConcurrentEvaluatorTest, HandlesOfAnotherProcessAreLostAndCancelDropsTheResult) {
  auto gated = std::make_shared<GatedEvaluator>();
  auto e = NewConcurrentEvaluator(gated, 0);
  EvaluationTask a{"c", 1, 1, "abc", ""};
  ASSERT_OK_AND_ASSIGN(EvaluationStatus lost, e->Poll(a, "local-77"));
  EXPECT_EQ(lost.kind, Kind::kLost);
  ASSERT_OK_AND_ASSIGN(std::string found, e->Find(a));
  EXPECT_EQ(found, "");
  ASSERT_OK_AND_ASSIGN(std::string h, e->Submit(a));
  ASSERT_OK(e->Cancel(h));
  ASSERT_OK_AND_ASSIGN(EvaluationStatus gone, e->Poll(a, h));
  EXPECT_EQ(gone.kind, Kind::kLost);
  gated->release.Notify();  // the destructor joins the cancelled thread
}

TEST(ReadQualityJsonTest, NeedsAFiniteLossAndNamesTheFile) {
  const fs::path d = fs::temp_directory_path() / "hilnas_quality_json";
  fs::create_directories(d);
  auto write = [&](const std::string& text) {
    std::ofstream(d / "q.json") << text;
    return ReadQualityJson((d / "q.json").string());
  };
  ASSERT_OK_AND_ASSIGN(QualityResult q, write(R"({"loss": 2.5, "tokens": 100, "seconds": 3})"));
  EXPECT_EQ(q.loss, 2.5);
  EXPECT_EQ(q.tokens, 100);
  EXPECT_TRUE(std::isnan(q.initial_loss));
  EXPECT_THAT(write(R"({"loss": "low"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("q.json")));
  EXPECT_THAT(write("not json"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("q.json")));
  EXPECT_THAT(ReadQualityJson((d / "absent.json").string()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("absent.json")));
}

TEST(ReadQualityJsonTest, ReadsTaskScoresAsEvalJsonWritesThem) {
  const fs::path d = fs::temp_directory_path() / "hilnas_quality_json_tasks";
  fs::create_directories(d);
  auto write = [&](const std::string& text) {
    std::ofstream(d / "q.json") << text;
    return ReadQualityJson((d / "q.json").string());
  };
  ASSERT_OK_AND_ASSIGN(
      QualityResult q,
      write(R"({"loss": 2.5, "tasks": [{"task": "piqa", "metric": "acc", "value": 0.625,
                "stderr": 0.01, "n": 1838}, {"task": "piqa", "metric": "acc_norm", "value": 0.7}]})"));
  ASSERT_EQ(q.tasks.size(), 2u);
  EXPECT_EQ(q.tasks[0].task, "piqa");
  EXPECT_EQ(q.tasks[0].metric, "acc");
  EXPECT_EQ(q.tasks[0].value, 0.625);
  EXPECT_EQ(q.tasks[0].stderr_, 0.01);
  EXPECT_EQ(q.tasks[0].n, 1838);
  EXPECT_EQ(q.tasks[1].metric, "acc_norm");
  EXPECT_THAT(write(R"({"loss": 2.5, "tasks": {"piqa": 0.6}})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"tasks\" is not an array")));
  EXPECT_THAT(write(R"({"loss": 2.5, "tasks": [{"task": "piqa", "value": 0.6}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tasks[0]: \"metric\"")));
  EXPECT_THAT(write(R"({"loss": 2.5, "tasks": [{"task": "a", "metric": "acc", "value": 0.5},
                                                 {"task": "b", "metric": "acc", "value": 61}]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tasks[1]: \"value\" is not in [0, 1]")));
}

}  // namespace
}  // namespace hilnas
