#include "coordinator/campaign_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/campaign_store.h"
#include "search_space/arch.h"

namespace hilnas {
StageTally TallyStage(const std::vector<Trial>& trials, int stage) {
  StageTally t;
  for (const Trial& trial : trials) {
    if (trial.stage() != stage) continue;
    ++t.total;
    t.open += !TrialFinished(trial.state());
    t.done += trial.state() == DONE;
    t.counted += trial.state() != ABANDONED;
    t.measuring = t.measuring || trial.state() == MEASURING;
    if (trial.state() == PROPOSED && t.proposed_id == 0) t.proposed_id = trial.id();
    t.in_flight += trial.state() == TRAINING;
    if (trial.state() == PROPOSED || trial.state() == PRUNING) {
      ++t.waiting;
      if (t.waiting_id == 0) t.waiting_id = trial.id();
    }
    t.seen.insert(ArchKey(trial.arch()));
  }
  return t;
}

FailureCheck CheckStageFailures(const CampaignConfig& config, int stage,
                                int64_t failures_count_after, const std::vector<Trial>& trials) {
  FailureCheck f;
  for (const Trial& t : trials) {
    if (t.stage() != stage || t.id() <= failures_count_after) continue;
    if (t.state() == FAILED) {
      ++f.failed;
      f.last = absl::StrCat("trial ", t.id(), ": ", t.message());
    }
    if (t.state() == FAILED || t.state() == DONE) ++f.finished;
  }
  f.stop = f.failed >= kMinFailuresToStop && f.failed > config.max_failed_fraction() * f.finished;
  return f;
}

Stage1Plan PlanStage1(const CampaignConfig& c, const StageTally& t) {
  Stage1Plan p;
  if (t.proposed_id != 0) {
    p.kind = Stage1Plan::Kind::kSubmit;
    p.trial = t.proposed_id;
    return p;
  }
  if (t.open > 0) return p;  // kWait
  if (t.total == 0 || t.done < kMinLatencyPoints) {
    p.n = t.total == 0 ? c.stage1_sobol_points()
                       : std::min(c.batch_size(), c.stage1_latency_points() - t.total);
    p.kind = p.n > 0 ? Stage1Plan::Kind::kSobol : Stage1Plan::Kind::kTooFew;
    return p;
  }
  p.kind = Stage1Plan::Kind::kFit;
  return p;
}

bool Stage1Finished(const CampaignConfig& c, const StageTally& t, double cv_r2) {
  return cv_r2 >= c.stage1_target_r2() || t.total >= c.stage1_latency_points();
}

int UncertaintyBatchSize(const CampaignConfig& c, const StageTally& t) {
  return std::min(c.batch_size(), c.stage1_latency_points() - t.total);
}

Stage2Plan PlanStage2(const CampaignConfig& c, Strategy strategy, const StageTally& t,
                      int max_in_flight) {
  Stage2Plan p;
  if (t.counted >= c.stage2_trials()) {
    if (t.open == 0) p.kind = Stage2Plan::Kind::kComplete;
    return p;
  }
  // Proposals not yet started, or every slot busy, hold the next batch back;
  // trials only confirming latency do not.
  if (t.waiting > 0 || t.in_flight >= std::max(1, max_in_flight)) return p;
  p.kind = Stage2Plan::Kind::kPropose;
  const int q = std::min(c.batch_size(), c.stage2_trials() - t.counted);
  const bool initial = strategy == Strategy::kQnehvi && t.counted < c.stage2_initial_points();
  p.strategy = initial ? Strategy::kSobol : strategy;
  p.q = initial ? std::min(q, c.stage2_initial_points() - t.counted) : q;
  return p;
}

int MaxInFlight(const CampaignConfig& c, int evaluator_capacity) {
  int n = c.max_in_flight() > 0 ? c.max_in_flight() : std::max(1, c.batch_size());
  if (evaluator_capacity > 0) n = std::min(n, evaluator_capacity);
  return n;
}

}  // namespace hilnas
