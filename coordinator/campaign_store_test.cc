#include "coordinator/campaign_store.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

class CampaignStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    std::filesystem::remove(path_);
    Reopen();
    CampaignConfig c;
    c.set_name("c1");
    c.mutable_reference()->set_loss(2.5);
    ASSERT_OK(store_->Create(c));
  }
  void Reopen() {
    store_.reset();
    auto s = CampaignStore::Open(path_, &clock_);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }
  static Trial Proposal(int layers, int stage = 2) {
    Trial t;
    t.set_stage(stage);
    t.set_state(PROPOSED);
    t.mutable_arch()->set_num_layers(layers);
    t.mutable_arch()->set_name(absl::StrCat("named-", layers));
    return t;
  }

  std::string path_;
  ManualClock clock_;
  std::unique_ptr<CampaignStore> store_;
};

TEST_F(CampaignStoreTest, CreateRefusesANameInUse) {
  CampaignConfig c;
  c.set_name("c1");
  EXPECT_THAT(store_->Create(c), StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("c1")));
  EXPECT_THAT(store_->Get("nope"), StatusIs(absl::StatusCode::kNotFound, HasSubstr("nope")));
}

TEST_F(CampaignStoreTest, BatchesGetConsecutiveNumbersThatSurviveReopening) {
  ASSERT_OK_AND_ASSIGN(auto a, store_->AddTrials("c1", {Proposal(2), Proposal(3)}));
  ASSERT_OK_AND_ASSIGN(auto b, store_->AddTrials("c1", {Proposal(4)}));
  EXPECT_EQ(a[0].id(), 1);
  EXPECT_EQ(a[1].id(), 2);
  EXPECT_EQ(b[0].id(), 3);
  Reopen();
  ASSERT_OK_AND_ASSIGN(auto all, store_->Trials("c1"));
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].arch().num_layers(), 4);
}

TEST_F(CampaignStoreTest, ARepeatedArchitectureRefusesTheWholeBatch) {
  ASSERT_OK(store_->AddTrials("c1", {Proposal(2)}).status());
  Trial same = Proposal(2);
  same.mutable_arch()->set_name("another name, same architecture");
  EXPECT_THAT(store_->AddTrials("c1", {Proposal(5), same}),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("already trial 1")));
  ASSERT_OK_AND_ASSIGN(auto all, store_->Trials("c1"));
  EXPECT_EQ(all.size(), 1u);  // trial 5 layers was not inserted either
  // The same architecture in the other stage is a different trial.
  ASSERT_OK(store_->AddTrials("c1", {Proposal(2, /*stage=*/1)}).status());
}

TEST_F(CampaignStoreTest, StateChangesOnlyFromTheStatesNamed) {
  EXPECT_THAT(store_->SetState("c1", CampaignEvent::kStop, ""),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("is created")));
  ASSERT_OK(store_->SetState("c1", CampaignEvent::kStart, "go"));
  ASSERT_OK_AND_ASSIGN(CampaignRecord r, store_->Get("c1"));
  EXPECT_EQ(r.state, CampaignState::kRunning);
  // Update writes progress but never the state.
  r.state = CampaignState::kCreated;
  r.stage = 2;
  r.cv_r2 = 0.5;
  ASSERT_OK(store_->Update(r));
  ASSERT_OK_AND_ASSIGN(r, store_->Get("c1"));
  EXPECT_EQ(r.state, CampaignState::kRunning);
  EXPECT_EQ(r.stage, 2);
  EXPECT_DOUBLE_EQ(r.cv_r2, 0.5);
  EXPECT_DOUBLE_EQ(r.reference.loss(), 2.5);
}

TEST_F(CampaignStoreTest, FinishAbandonsEveryOpenTrial) {
  ASSERT_OK(store_->SetState("c1", CampaignEvent::kStart, ""));
  ASSERT_OK_AND_ASSIGN(auto t, store_->AddTrials("c1", {Proposal(2), Proposal(3), Proposal(4)}));
  t[0].set_state(DONE);
  t[1].set_state(TRAINING);
  ASSERT_OK(store_->UpdateTrial(t[0]));
  ASSERT_OK(store_->UpdateTrial(t[1]));
  ASSERT_OK(store_->Finish("c1", CampaignEvent::kFail, "too many failures"));
  ASSERT_OK_AND_ASSIGN(auto all, store_->Trials("c1"));
  EXPECT_EQ(all[0].state(), DONE);
  EXPECT_EQ(all[1].state(), ABANDONED);
  EXPECT_EQ(all[2].state(), ABANDONED);
  EXPECT_EQ(all[2].message(), "too many failures");
  ASSERT_OK_AND_ASSIGN(CampaignRecord r, store_->Get("c1"));
  EXPECT_EQ(r.state, CampaignState::kFailed);
  EXPECT_THAT(store_->Finish("c1", CampaignEvent::kComplete, ""),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
}

TEST_F(CampaignStoreTest, LogKeepsTheNewestLinesInOrder) {
  for (int i = 0; i < 5; ++i) ASSERT_OK(store_->Log("c1", absl::StrCat("line ", i)));
  ASSERT_OK_AND_ASSIGN(auto lines, store_->LogLines("c1", 2));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].text, "line 3");
  EXPECT_EQ(lines[1].text, "line 4");
}

}  // namespace
}  // namespace hilnas
