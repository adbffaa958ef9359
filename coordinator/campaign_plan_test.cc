#include "coordinator/campaign_plan.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hilnas {
namespace {

Trial MakeTrial(int64_t id, int stage, TrialState state, int layers) {
  Trial t;
  t.set_id(id);
  t.set_stage(stage);
  t.set_state(state);
  t.mutable_arch()->set_num_layers(layers);
  return t;
}

CampaignConfig Config() {
  CampaignConfig c;
  c.set_stage1_sobol_points(6);
  c.set_stage1_latency_points(10);
  c.set_stage1_target_r2(0.9);
  c.set_batch_size(4);
  c.set_stage2_trials(12);
  c.set_stage2_initial_points(6);
  c.set_max_failed_fraction(0.25);
  return c;
}

TEST(CampaignPlanTest, TallyCountsOneStageOnly) {
  const std::vector<Trial> trials = {MakeTrial(1, 1, DONE, 4),      MakeTrial(2, 1, MEASURING, 5),
                                     MakeTrial(3, 2, PROPOSED, 6),  MakeTrial(4, 2, ABANDONED, 7),
                                     MakeTrial(5, 2, MEASURING, 8), MakeTrial(6, 2, TRAINING, 9)};
  const StageTally one = TallyStage(trials, 1);
  EXPECT_EQ(one.total, 2);
  EXPECT_EQ(one.open, 1);
  EXPECT_EQ(one.done, 1);
  EXPECT_TRUE(one.measuring);
  EXPECT_EQ(one.proposed_id, 0);
  const StageTally two = TallyStage(trials, 2);
  EXPECT_EQ(two.total, 4);
  EXPECT_EQ(two.counted, 3);
  EXPECT_EQ(two.open, 3);
  EXPECT_EQ(two.proposed_id, 3);
  EXPECT_EQ(two.in_flight, 1);
  EXPECT_EQ(two.waiting, 1);
  EXPECT_EQ(two.waiting_id, 3);
  EXPECT_EQ(two.seen.size(), 4u);
}

TEST(CampaignPlanTest, StageOneSubmitsThenWaitsThenProposesThenFits) {
  const CampaignConfig c = Config();
  EXPECT_EQ(PlanStage1(c, TallyStage({}, 1)).kind, Stage1Plan::Kind::kSobol);
  EXPECT_EQ(PlanStage1(c, TallyStage({}, 1)).n, 6);
  const Stage1Plan submit = PlanStage1(c, TallyStage({MakeTrial(7, 1, PROPOSED, 4)}, 1));
  EXPECT_EQ(submit.kind, Stage1Plan::Kind::kSubmit);
  EXPECT_EQ(submit.trial, 7);
  EXPECT_EQ(PlanStage1(c, TallyStage({MakeTrial(1, 1, MEASURING, 4)}, 1)).kind,
            Stage1Plan::Kind::kWait);
  std::vector<Trial> three_done;
  for (int i = 1; i <= kMinLatencyPoints; ++i) three_done.push_back(MakeTrial(i, 1, DONE, i));
  EXPECT_EQ(PlanStage1(c, TallyStage(three_done, 1)).kind, Stage1Plan::Kind::kFit);
}

TEST(CampaignPlanTest, StageOneWithTooFewMeasurementsRetriesThenFails) {
  CampaignConfig c = Config();
  std::vector<Trial> trials = {MakeTrial(1, 1, DONE, 1), MakeTrial(2, 1, FAILED, 2)};
  Stage1Plan p = PlanStage1(c, TallyStage(trials, 1));
  EXPECT_EQ(p.kind, Stage1Plan::Kind::kSobol);
  EXPECT_EQ(p.n, 4);  // a batch, within the budget of 10
  c.set_stage1_latency_points(2);
  EXPECT_EQ(PlanStage1(c, TallyStage(trials, 1)).kind, Stage1Plan::Kind::kTooFew);
}

TEST(CampaignPlanTest, StageOneEndsAtTargetOrBudget) {
  const CampaignConfig c = Config();
  StageTally t;
  t.total = 6;
  EXPECT_FALSE(Stage1Finished(c, t, 0.8));
  EXPECT_TRUE(Stage1Finished(c, t, 0.95));
  EXPECT_EQ(UncertaintyBatchSize(c, t), 4);
  t.total = 10;
  EXPECT_TRUE(Stage1Finished(c, t, 0.1));
}

TEST(CampaignPlanTest, QnehviStartsWithSobolUpToTheInitialPoints) {
  const CampaignConfig c = Config();
  StageTally t;
  Stage2Plan p = PlanStage2(c, Strategy::kQnehvi, t, 1);
  EXPECT_EQ(p.kind, Stage2Plan::Kind::kPropose);
  EXPECT_EQ(p.strategy, Strategy::kSobol);
  EXPECT_EQ(p.q, 4);
  t.counted = 4;
  p = PlanStage2(c, Strategy::kQnehvi, t, 1);
  EXPECT_EQ(p.strategy, Strategy::kSobol);
  EXPECT_EQ(p.q, 2);  // only up to the 6 initial points
  t.counted = 6;
  p = PlanStage2(c, Strategy::kQnehvi, t, 1);
  EXPECT_EQ(p.strategy, Strategy::kQnehvi);
  EXPECT_EQ(p.q, 4);
  t.counted = 10;
  EXPECT_EQ(PlanStage2(c, Strategy::kQnehvi, t, 1).q, 2);  // the budget's remainder
  EXPECT_EQ(PlanStage2(c, Strategy::kRandom, StageTally{}, 1).strategy, Strategy::kRandom);
}

TEST(CampaignPlanTest, StageTwoWaitsForEvaluationsAndCompletesAfterConfirmations) {
  const CampaignConfig c = Config();
  StageTally t;
  t.in_flight = 1;
  EXPECT_EQ(PlanStage2(c, Strategy::kQnehvi, t, 1).kind, Stage2Plan::Kind::kWait);
  t.in_flight = 0;
  t.waiting = 1;
  EXPECT_EQ(PlanStage2(c, Strategy::kQnehvi, t, 1).kind, Stage2Plan::Kind::kWait);
  t.waiting = 0;
  t.counted = 12;
  t.open = 1;  // a confirmation is out
  EXPECT_EQ(PlanStage2(c, Strategy::kQnehvi, t, 1).kind, Stage2Plan::Kind::kWait);
  t.open = 0;
  EXPECT_EQ(PlanStage2(c, Strategy::kQnehvi, t, 1).kind, Stage2Plan::Kind::kComplete);
}

TEST(CampaignPlanTest, WithSlotsFreeTheNextBatchIsProposedWhileOthersEvaluate) {
  const CampaignConfig c = Config();
  StageTally t;
  t.counted = 6;
  t.in_flight = 1;
  Stage2Plan p = PlanStage2(c, Strategy::kQnehvi, t, 2);
  EXPECT_EQ(p.kind, Stage2Plan::Kind::kPropose);  // one slot free: the one out is pending
  EXPECT_EQ(p.q, 4);
  t.in_flight = 2;
  EXPECT_EQ(PlanStage2(c, Strategy::kQnehvi, t, 2).kind, Stage2Plan::Kind::kWait);
  t.in_flight = 1;
  t.waiting = 1;  // a proposal waits for the free slot
  EXPECT_EQ(PlanStage2(c, Strategy::kQnehvi, t, 2).kind, Stage2Plan::Kind::kWait);
}

TEST(CampaignPlanTest, InFlightDefaultsToTheBatchCappedByTheEvaluator) {
  CampaignConfig c = Config();
  c.set_batch_size(4);
  EXPECT_EQ(MaxInFlight(c, 0), 4);
  EXPECT_EQ(MaxInFlight(c, 1), 1);
  c.set_max_in_flight(2);
  EXPECT_EQ(MaxInFlight(c, 0), 2);
  EXPECT_EQ(MaxInFlight(c, 3), 2);
}

TEST(CampaignPlanTest, FailuresStopOnlyPastTheFractionAndTheMinimum) {
  const CampaignConfig c = Config();
  std::vector<Trial> trials = {MakeTrial(1, 2, FAILED, 1), MakeTrial(2, 2, FAILED, 2)};
  EXPECT_FALSE(CheckStageFailures(c, 2, 0, trials).stop);  // 2 < kMinFailuresToStop
  trials.push_back(MakeTrial(3, 2, FAILED, 3));
  FailureCheck f = CheckStageFailures(c, 2, 0, trials);
  EXPECT_TRUE(f.stop);
  EXPECT_EQ(f.failed, 3);
  EXPECT_EQ(f.last, "trial 3: ");
  EXPECT_FALSE(CheckStageFailures(c, 2, /*failures_count_after=*/3, trials).stop);
  for (int i = 4; i < 16; ++i) trials.push_back(MakeTrial(i, 2, DONE, i));
  EXPECT_FALSE(CheckStageFailures(c, 2, 0, trials).stop);  // 3 of 15 is under 25%
}

}  // namespace
}  // namespace hilnas
