#include "quality/slurm_evaluator.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::hilnas::testing::StatusIs;
using ::testing::Contains;
using ::testing::HasSubstr;
using Kind = EvaluationStatus::Kind;

TEST(SlurmStateTest, EveryEndMapsToResultRetryOrFailure) {
  EXPECT_EQ(SlurmStateKind("PENDING"), Kind::kQueued);
  EXPECT_EQ(SlurmStateKind("REQUEUED"), Kind::kQueued);
  EXPECT_EQ(SlurmStateKind("RUNNING"), Kind::kRunning);
  EXPECT_EQ(SlurmStateKind("COMPLETING"), Kind::kRunning);
  EXPECT_EQ(SlurmStateKind("COMPLETED"), Kind::kDone);
  for (const char* retry : {"FAILED", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "CANCELLED by 0"}) {
    EXPECT_EQ(SlurmStateKind(retry), Kind::kRetry) << retry;
  }
  for (const char* fail : {"TIMEOUT", "OUT_OF_MEMORY", "DEADLINE"}) {
    EXPECT_EQ(SlurmStateKind(fail), Kind::kFailed) << fail;
  }
}

TEST(SlurmStateTest, SbatchParsableOutput) {
  ASSERT_OK_AND_ASSIGN(std::string id, ParseSbatchOutput("4121\n"));
  EXPECT_EQ(id, "4121");
  ASSERT_OK_AND_ASSIGN(id, ParseSbatchOutput("77;cluster-a\n"));
  EXPECT_EQ(id, "77");
  EXPECT_THAT(ParseSbatchOutput("sbatch: error: Batch job submission failed"),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("not a job id")));
  EXPECT_THAT(ParseSbatchOutput(""),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("not a job id")));
}

SlurmEvaluatorConfig Good() {
  SlurmEvaluatorConfig c;
  c.set_shared_dir("/shared/hilnas");
  c.set_script("train {checkpoint} > {output}");
  c.set_max_attempts(3);
  c.set_poll_seconds(2);
  c.set_max_poll_seconds(30);
  return c;
}

TEST(SlurmConfigTest, BadFieldsAreNamed) {
  EXPECT_OK(ValidateSlurmEvaluatorConfig(Good(), "f"));
  auto field_error = [](SlurmEvaluatorConfig c) {
    return std::string(ValidateSlurmEvaluatorConfig(c, "slurm.textproto").message());
  };
  SlurmEvaluatorConfig c = Good();
  c.set_shared_dir("relative/dir");
  EXPECT_THAT(field_error(c), HasSubstr("shared_dir"));
  c = Good();
  c.set_shared_dir("/shared/a b");
  EXPECT_THAT(field_error(c), HasSubstr("shared_dir"));
  c = Good();
  c.set_script("train {checkpoint}");
  EXPECT_THAT(field_error(c), HasSubstr("{output}"));
  c = Good();
  c.set_partition("gpu; rm -rf /");
  EXPECT_THAT(field_error(c), HasSubstr("partition"));
  c = Good();
  c.set_max_attempts(0);
  EXPECT_THAT(field_error(c), HasSubstr("max_attempts"));
  c = Good();
  c.add_sbatch_args("-p gpu");
  EXPECT_THAT(field_error(c), HasSubstr("sbatch_args"));
  EXPECT_THAT(field_error(c), HasSubstr("slurm.textproto"));
}

TEST(SlurmConfigTest, ReadsDefaultsFromTheFile) {
  const fs::path f = fs::temp_directory_path() / "hilnas_slurm_cfg.textproto";
  std::ofstream(f) << "shared_dir: \"/shared\"\nscript: \"x {output}\"\n";
  ASSERT_OK_AND_ASSIGN(SlurmEvaluatorConfig c, ReadSlurmEvaluatorConfig(f.string()));
  EXPECT_EQ(c.max_attempts(), 3);
  EXPECT_EQ(c.poll_seconds(), 2);
  EXPECT_EQ(c.max_poll_seconds(), 30);
  std::ofstream(f) << "shared_dir: \"/shared\"\nscrip: \"x\"\n";
  EXPECT_THAT(ReadSlurmEvaluatorConfig(f.string()).status().message(),
              HasSubstr("hilnas_slurm_cfg.textproto"));
}

TEST(SlurmConfigTest, SbatchGetsNameLimitsAndNoCoordinatorEnvironment) {
  SlurmEvaluatorConfig c = Good();
  c.set_partition("gpu");
  c.set_gres("gpu:8");
  c.set_cpus_per_task(16);
  c.set_mem_mb(64000);
  c.set_time_limit_minutes(90);
  c.add_sbatch_args("--qos=short");
  EvaluationTask t{"camp", 7, 2, "/shared/camp/trial-7/checkpoint", "/shared/camp/trial-7/a2"};
  const std::vector<std::string> a = SbatchArgs(c, t, "/shared/camp/trial-7/a2/job.sh");
  EXPECT_THAT(a, Contains("--job-name=hilnas-camp-7-2"));
  EXPECT_THAT(a, Contains("--parsable"));
  EXPECT_THAT(a, Contains("--partition=gpu"));
  EXPECT_THAT(a, Contains("--gres=gpu:8"));
  EXPECT_THAT(a, Contains("--cpus-per-task=16"));
  EXPECT_THAT(a, Contains("--mem=64000"));
  EXPECT_THAT(a, Contains("--time=90"));
  EXPECT_THAT(a, Contains("--qos=short"));
  EXPECT_THAT(a, Contains("--export=PATH,HOME,LANG,LD_LIBRARY_PATH"));
  EXPECT_EQ(a.back(), "/shared/camp/trial-7/a2/job.sh");
}

TEST(SlurmEvaluatorTest, ASlurmCommandThatFailsIsAnErrorNamingIt) {
  SlurmEvaluatorConfig c = Good();
  c.set_shared_dir((fs::temp_directory_path() / "hilnas_slurm_nobin").string());
  c.set_bin_dir("/nonexistent/slurm/bin");
  auto e = NewSlurmEvaluator(c);
  EvaluationTask t{"camp", 1, 1, c.shared_dir() + "/ck", c.shared_dir() + "/w"};
  EXPECT_THAT(e->Submit(t).status().message(), HasSubstr("sbatch"));
  EvaluationTask unsafe{"camp", 1, 1, "/shared/a;b", c.shared_dir() + "/w"};
  EXPECT_THAT(e->Submit(unsafe).status().message(), HasSubstr("{checkpoint}"));
}

}  // namespace
}  // namespace hilnas
