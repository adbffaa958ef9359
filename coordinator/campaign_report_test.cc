#include "coordinator/campaign_report.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace hilnas {
namespace {

using ::testing::HasSubstr;

struct Fixture {
  CampaignRecord record;
  std::vector<Trial> trials;
  Fixture() {
    record.config.set_name("r");
    record.stage = 2;
    record.reference.set_loss(3);
    record.reference.set_ttft_ms(100);
    // (loss, TTFT): (2.5, 10) and (2.0, 50) on the front; (2.6, 60) dominated;
    // a stage-1 trial and a failed one are not evaluated.
    const double pts[][2] = {{2.5, 10}, {2.0, 50}, {2.6, 60}};
    for (int i = 0; i < 3; ++i) {
      Trial& t = trials.emplace_back();
      t.set_id(i + 1);
      t.set_stage(2);
      t.set_state(DONE);
      t.set_loss(pts[i][0]);
      t.set_predicted_ttft_ms(pts[i][1]);
      t.mutable_arch()->set_num_layers(3 + i);
      t.mutable_arch()->add_attention(FULL);
    }
    Trial& s1 = trials.emplace_back();
    s1.set_id(4), s1.set_stage(1), s1.set_state(DONE), s1.set_measured_ttft_ms(5);
    Trial& f = trials.emplace_back();
    f.set_id(5), f.set_stage(2), f.set_state(FAILED);
  }
};

TEST(CampaignReportTest, FrontAndHypervolumeCountOnlyEvaluatedStage2Trials) {
  Fixture f;
  const FrontView v = ComputeFront(f.record, f.trials);
  ASSERT_EQ(v.evaluated.size(), 3u);
  EXPECT_EQ(v.on_front, (std::vector<bool>{true, true, false}));
  // Box below (3, 100): (2.5,10) covers 0.5 x 90 = 45; (2.0,50) adds 0.5 x 50 = 25.
  EXPECT_DOUBLE_EQ(v.hypervolume, 70);
  EXPECT_THAT(FrontSummary(f.record, f.trials), HasSubstr("3 trials evaluated, 2 on the front"));
}

TEST(CampaignReportTest, ExportsAgreeWithTheFront) {
  Fixture f;
  const std::string csv = ParetoCsv(f.record, f.trials);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 4);
  // A campaign from before deployment precisions: f32 latency, loss as trained.
  EXPECT_THAT(csv, HasSubstr(",2.000000,1,fp32,as trained\n"));
  EXPECT_THAT(csv, HasSubstr(",2.600000,0,fp32,as trained\n"));
  auto j = nlohmann::json::parse(ParetoJson(f.record, f.trials));
  EXPECT_DOUBLE_EQ(j["hypervolume"].get<double>(), 70);
  EXPECT_EQ(j["reference"]["ttft"], 100);
  EXPECT_EQ(j["deployment"]["latency_precision"], "fp32");
  const std::string table = ParetoTable(f.record, f.trials, /*all=*/true);
  EXPECT_EQ(std::count(table.begin(), table.end(), '\n'), 7);  // 2 header lines + 5 trials
}

// Every export says which precision its figures are for.
TEST(CampaignReportTest, ExportsNameTheDeploymentPrecision) {
  Fixture f;
  f.record.config.mutable_benchmark()->set_precision(Q4_0);
  f.record.config.mutable_benchmark()->set_threads(2);
  f.record.config.set_ttft_prompt_tokens(256);
  f.record.config.mutable_train()->set_eval_weight_dtype("q4_0");
  EXPECT_EQ(DeploymentSummary(f.record.config),
            "latency at q4_0 weights, 2 thread(s), TTFT at 256 tokens; loss after q4_0");
  EXPECT_THAT(ParetoCsv(f.record, f.trials), HasSubstr(",latency_precision,loss_precision\n"));
  EXPECT_THAT(ParetoCsv(f.record, f.trials), HasSubstr(",1,q4_0,q4_0\n"));
  auto j = nlohmann::json::parse(ParetoJson(f.record, f.trials));
  EXPECT_EQ(j["deployment"]["latency_precision"], "q4_0");
  EXPECT_EQ(j["deployment"]["loss_precision"], "q4_0");
  EXPECT_EQ(j["deployment"]["threads"], 2);
}

// A quantized KV cache is part of the deployment: named in the summary and
// in every export, without a comma that would split the CSV's field.
TEST(CampaignReportTest, ExportsNameTheKvCachePrecision) {
  Fixture f;
  f.record.config.mutable_benchmark()->set_precision(Q4_0);
  f.record.config.mutable_benchmark()->set_kv_dtype("q8_0");
  f.record.config.mutable_benchmark()->set_threads(4);
  f.record.config.set_ttft_prompt_tokens(1024);
  f.record.config.mutable_train()->set_eval_weight_dtype("q4_0");
  f.record.config.mutable_train()->set_eval_kv_dtype("q8_0");
  EXPECT_EQ(DeploymentSummary(f.record.config),
            "latency at q4_0 weights with q8_0 KV cache, 4 thread(s), TTFT at 1024 tokens; loss "
            "after q4_0 with q8_0 KV cache");
  EXPECT_THAT(ParetoCsv(f.record, f.trials),
              HasSubstr(",1,q4_0 with q8_0 KV cache,q4_0 with q8_0 KV cache\n"));
  auto j = nlohmann::json::parse(ParetoJson(f.record, f.trials));
  EXPECT_EQ(j["deployment"]["latency_precision"], "q4_0 with q8_0 KV cache");
}

void AddScore(Trial& t, const std::string& task, const std::string& metric, double value) {
  TaskScore* s = t.add_task_scores();
  s->set_task(task);
  s->set_metric(metric);
  s->set_value(value);
  s->set_std_err(0.01);
  s->set_n(500);
}

// Task scores (CampaignConfig.tasks, `pareto report --task`) become columns
// of every export; a trial without one shows a dash or empty field.
TEST(CampaignReportTest, TaskScoresAreColumnsOfEveryExport) {
  Fixture f;
  AddScore(f.trials[0], "cloze", "acc", 0.84);
  AddScore(f.trials[0], "cloze", "acc_norm", 0.86);
  AddScore(f.trials[1], "cloze", "acc", 0.96);
  const std::string table = ParetoTable(f.record, f.trials, /*all=*/false);
  EXPECT_THAT(table, HasSubstr("| loss | cloze acc | cloze acc_norm | front |"));
  EXPECT_THAT(table, HasSubstr("| 2.5000 | 0.840 ± 0.010 | 0.860 ± 0.010 | * |"));
  EXPECT_THAT(table, HasSubstr("| 2.0000 | 0.960 ± 0.010 | - | * |"));
  EXPECT_THAT(table, HasSubstr("| 2.6000 | - | - |  |"));
  const std::string csv = ParetoCsv(f.record, f.trials);
  EXPECT_THAT(csv, HasSubstr(
      ",loss_precision,cloze:acc,cloze:acc:stderr,cloze:acc_norm,cloze:acc_norm:stderr\n"));
  EXPECT_THAT(csv, HasSubstr(",as trained,0.840000,0.010000,0.860000,0.010000\n"));
  EXPECT_THAT(csv, HasSubstr(",as trained,0.960000,0.010000,,\n"));
  auto j = nlohmann::json::parse(ParetoJson(f.record, f.trials));
  EXPECT_EQ(j["trials"][0]["tasks"][1]["metric"], "acc_norm");
  EXPECT_DOUBLE_EQ(j["trials"][0]["tasks"][1]["value"].get<double>(), 0.86);
  EXPECT_FALSE(j["trials"][2].contains("tasks"));
}

// With a quality_task the quality objective is the task's error: the front
// is drawn in (1 - score, TTFT), against reference.task_error.
TEST(CampaignReportTest, AQualityTaskReplacesTheLossAsObjective) {
  Fixture f;
  f.record.config.set_quality_task("cloze/acc");
  f.record.reference.set_task_error(0.5);
  // Loss would put trials 1 and 2 on the front; accuracy puts 1 and 3.
  AddScore(f.trials[0], "cloze", "acc", 0.70);
  AddScore(f.trials[1], "cloze", "acc", 0.60);
  AddScore(f.trials[2], "cloze", "acc", 0.90);
  EXPECT_DOUBLE_EQ(QualityObjective(f.record.config, f.trials[0]), 0.30000000000000004);
  EXPECT_EQ(QualityObjectiveName(f.record.config), "1 - cloze acc");
  const FrontView v = ComputeFront(f.record, f.trials);
  EXPECT_EQ(v.on_front, (std::vector<bool>{true, false, true}));
  EXPECT_DOUBLE_EQ(v.reference[0], 0.5);
  // Box below (0.5, 100): (0.3, 10) covers 0.2 x 90 = 18; (0.1, 60) adds 0.2 x 40 = 8.
  EXPECT_NEAR(v.hypervolume, 26, 1e-9);
  // "TASK" alone takes the task's first metric; a trial without it has NaN.
  f.record.config.set_quality_task("cloze");
  EXPECT_NEAR(QualityObjective(f.record.config, f.trials[2]), 0.1, 1e-12);
  EXPECT_TRUE(std::isnan(QualityObjective(f.record.config, f.trials[3])));
  EXPECT_THAT(ParetoSvg(f.record, f.trials), HasSubstr("1 - cloze (error)"));
}

TEST(CampaignReportTest, PlotShowsTrialsFrontReferenceAndPublishedShapes) {
  Fixture f;
  const std::string svg = ParetoSvg(f.record, f.trials, {{"mobilellm-flash-350m", 30}});
  EXPECT_THAT(svg, HasSubstr("<svg"));
  EXPECT_THAT(svg, HasSubstr("reference"));
  EXPECT_THAT(svg, HasSubstr("mobilellm-flash-350m"));
  EXPECT_THAT(svg, HasSubstr("trial 2: "));
  EXPECT_EQ(std::count(svg.begin(), svg.end(), 'H') > 0, true);  // the staircase path
}

}  // namespace
}  // namespace hilnas
