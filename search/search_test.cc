#include "search/search.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "search_space/counts.h"
#include "util/status_matchers.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

Space DemoSpace() {
  SearchSpace proto;
  EXPECT_OK(
      ReadTextProtoFile(std::string(HILNAS_SOURCE_DIR) + "/configs/demo-space.textproto", &proto));
  return *Space::FromProto(proto);
}

// A latency model on a smooth synthetic TTFT (grows with FLOPs).
LatencyModel SyntheticTtft(const Space& space) {
  std::vector<LatencyRow> rows;
  const std::vector<Arch> archs = *FreshSobol(space, 40, 5, {});
  for (const Arch& a : archs) {
    LatencyRow r;
    r.device = "synthetic";
    r.arch = a;
    r.prompt_tokens = 256;
    r.ttft_ms = 1 + PrefillFlops(a, 256) / 1e8;
    r.ttft_se_ms = 0.01;
    rows.push_back(r);
  }
  GpOptions o;
  o.steps = 60;
  o.restarts = 1;
  return *LatencyModel::Fit(space, "synthetic", LatencyMetric::kTtft, 256, rows, o);
}

TEST(FreshSobolTest, SkipsWhatWasSeenAndKeepsTheSequenceOrder) {
  const Space space = DemoSpace();
  ASSERT_OK_AND_ASSIGN(auto first, FreshSobol(space, 6, 1, {}));
  std::set<std::string> seen = {KeyOf(first[0]), KeyOf(first[2])};
  ASSERT_OK_AND_ASSIGN(auto again, FreshSobol(space, 4, 1, seen));
  EXPECT_EQ(KeyOf(again[0]), KeyOf(first[1]));
  EXPECT_EQ(KeyOf(again[1]), KeyOf(first[3]));
  for (const Arch& a : again) EXPECT_FALSE(seen.count(KeyOf(a)));
}

TEST(MutationsTest, AreMembersOneStepAwayAndNew) {
  const Space space = DemoSpace();
  ASSERT_OK_AND_ASSIGN(auto parents, FreshSobol(space, 3, 2, {}));
  std::set<std::string> seen;
  for (const Arch& p : parents) seen.insert(KeyOf(p));
  const std::vector<Arch> kids = Mutations(space, parents, seen);
  ASSERT_FALSE(kids.empty());
  std::set<std::string> keys;
  for (const Arch& k : kids) {
    EXPECT_OK(space.Contains(k));
    EXPECT_TRUE(keys.insert(KeyOf(k)).second) << "duplicate mutation";
    EXPECT_FALSE(seen.count(KeyOf(k)));
  }
}

TEST(ProposeBatchTest, EveryStrategyProposesDistinctUnseenMembers) {
  const Space space = DemoSpace();
  const LatencyModel ttft = SyntheticTtft(space);
  SearchState state;
  state.space = &space;
  state.ttft = &ttft;
  state.prompt_tokens = 256;
  state.reference = {3.0, 1e9};
  // Observations: loss falls with parameters.
  const std::vector<Arch> observed = *FreshSobol(space, 12, 9, {});
  for (const Arch& a : observed) {
    state.observed.push_back(a);
    state.observed_loss.push_back(4 - 0.3 * std::log10(CountParameters(a).model()));
    state.seen.insert(KeyOf(a));
  }
  for (const Strategy s : {Strategy::kQnehvi, Strategy::kSobol, Strategy::kRandom}) {
    const std::string strategy(StrategyName(s));
    ProposeOptions o;
    o.strategy = s;
    o.q = 5;
    o.candidates = 200;
    o.mc_samples = 16;
    o.gp.steps = 40;
    o.gp.restarts = 1;
    ASSERT_OK_AND_ASSIGN(std::vector<Proposal> batch, ProposeBatch(state, o));
    ASSERT_EQ(batch.size(), 5u) << strategy;
    std::set<std::string> keys;
    for (const Proposal& p : batch) {
      EXPECT_OK(space.Contains(p.arch));
      EXPECT_FALSE(state.seen.count(KeyOf(p.arch))) << strategy;
      EXPECT_TRUE(keys.insert(KeyOf(p.arch)).second) << strategy;
      EXPECT_THAT(std::string(ProvenanceName(p.provenance)), ::testing::StartsWith(strategy));
    }
  }
}

TEST(ProposeBatchTest, QNehviOverAPoolProposesOnlyPoolMembers) {
  const Space space = DemoSpace();
  const LatencyModel ttft = SyntheticTtft(space);
  SearchState state;
  state.space = &space;
  state.ttft = &ttft;
  state.reference = {3.0, 1e9};
  ProposeOptions o;
  ASSERT_OK_AND_ASSIGN(o.pool, FreshSobol(space, 30, 11, {}));
  for (int i = 0; i < 10; ++i) {
    state.observed.push_back(o.pool[i]);
    state.observed_loss.push_back(2 + 0.01 * i);
    state.seen.insert(KeyOf(o.pool[i]));
  }
  o.q = 4;
  o.mc_samples = 16;
  o.gp.steps = 40;
  ASSERT_OK_AND_ASSIGN(std::vector<Proposal> batch, ProposeBatch(state, o));
  std::set<std::string> pool;
  for (int i = 10; i < 30; ++i) pool.insert(KeyOf(o.pool[i]));
  for (const Proposal& p : batch) EXPECT_TRUE(pool.count(KeyOf(p.arch)));
}

TEST(ProposeLatencyBatchTest, SpreadsItsPicks) {
  const Space space = DemoSpace();
  const LatencyModel ttft = SyntheticTtft(space);
  ASSERT_OK_AND_ASSIGN(auto picks, ProposeLatencyBatch(space, ttft, 20, 6, 300, 3, {}));
  ASSERT_EQ(picks.size(), 6u);
  std::set<std::string> keys;
  for (const Proposal& p : picks) {
    EXPECT_TRUE(keys.insert(KeyOf(p.arch)).second);
    EXPECT_GT(p.acquisition, 0);
  }
}

}  // namespace
}  // namespace hilnas
