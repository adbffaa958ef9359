// The campaign runner's decisions as pure functions of the stored trials
// (MobileLLM-Flash Sec. 3.4's two stages): a tally of one stage, and what
// each stage does next. No I/O, no models: the runner (campaign_runner.cc)
// performs what these decide, and tests check the decisions directly.
#ifndef HILNAS_COORDINATOR_CAMPAIGN_PLAN_H_
#define HILNAS_COORDINATOR_CAMPAIGN_PLAN_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "proto/campaign.pb.h"
#include "search/strategy.h"

namespace hilnas {

// A GP latency model needs this many measured architectures.
inline constexpr int kMinLatencyPoints = 3;
// A campaign is never failed for fewer failed trials than this, whatever
// max_failed_fraction says (one unlucky trial must not end a search).
inline constexpr int kMinFailuresToStop = 3;

// One stage's trials, counted.
struct StageTally {
  int total = 0;               // trials of the stage
  int open = 0;                // not yet DONE, FAILED or ABANDONED
  int done = 0;                // DONE
  int counted = 0;             // not ABANDONED: what the stage-2 budget counts
  bool measuring = false;      // some trial is MEASURING
  int64_t proposed_id = 0;     // the first PROPOSED trial, 0 when none
  int in_flight = 0;           // stage 2: TRAINING (an evaluation is out, or being submitted)
  int waiting = 0;             // stage 2: PROPOSED or PRUNING (to prune and submit)
  int64_t waiting_id = 0;      // the first of those, 0 when none
  std::set<std::string> seen;  // ArchKey of every trial of the stage
};
StageTally TallyStage(const std::vector<Trial>& trials, int stage);

// Failures of the current stage since the last resume.
struct FailureCheck {
  bool stop = false;  // more than max_failed_fraction, and at least kMinFailuresToStop
  int failed = 0, finished = 0;
  std::string last;  // "trial N: message" of the last failure
};
FailureCheck CheckStageFailures(const CampaignConfig& config, int stage,
                                int64_t failures_count_after, const std::vector<Trial>& trials);

// Stage 1 before its latency model is fitted.
struct Stage1Plan {
  enum class Kind {
    kSubmit,  // queue the benchmark job of trial `trial`
    kWait,    // jobs are out
    kSobol,   // propose `n` Sobol architectures
    kTooFew,  // the budget is spent with fewer than kMinLatencyPoints measured: fail
    kFit,     // fit and cross-validate the model, then ask Stage1Finished
  };
  Kind kind = Kind::kWait;
  int64_t trial = 0;
  int n = 0;
};
Stage1Plan PlanStage1(const CampaignConfig& config, const StageTally& tally);

// After the fit: stage 1 ends at the CV R^2 target or its budget. Otherwise
// the next uncertainty batch has UncertaintyBatchSize points.
bool Stage1Finished(const CampaignConfig& config, const StageTally& tally, double cv_r2);
int UncertaintyBatchSize(const CampaignConfig& config, const StageTally& tally);

// Stage 2 once no waiting trial can start (all slots busy, or none waits).
struct Stage2Plan {
  enum class Kind {
    kWait,      // evaluations or confirmations are out
    kComplete,  // the trial budget is spent and nothing is open
    kPropose,   // propose `q` trials by `strategy`
  };
  Kind kind = Kind::kWait;
  Strategy strategy = Strategy::kQnehvi;
  int q = 0;
};
// `strategy` is the campaign's; qNEHVI starts with stage2_initial_points
// Sobol trials. A batch is proposed when no proposal waits and fewer than
// `max_in_flight` evaluations are out; those out are the batch's pending
// points. With max_in_flight 1 this is the sequential loop: a batch, its
// trials one by one, the next batch.
Stage2Plan PlanStage2(const CampaignConfig& config, Strategy strategy, const StageTally& tally,
                      int max_in_flight);

// The campaign's max_in_flight (default: batch_size), capped by what the
// evaluator can run at once (0: no cap of its own; the in-process trainer's
// is 1 unless the campaign sets max_in_flight, coordinator/evaluators.h).
int MaxInFlight(const CampaignConfig& config, int evaluator_capacity);

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_CAMPAIGN_PLAN_H_
