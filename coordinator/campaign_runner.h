// Drives running campaigns through the two stages of MobileLLM-Flash
// Sec. 3.4, inside the coordinator process:
//   stage 1: Sobol architectures become benchmark jobs on the campaign's
//     pool; the GP latency model is fitted and cross-validated as results
//     arrive; further batches go where it is least sure under the reference
//     TTFT, until the CV R^2 target or the budget;
//   stage 2: batches of q proposals (Sobol first, then qNEHVI on loss and
//     predicted TTFT, or a baseline strategy), each pruned from the backbone,
//     trained and scored by the quality evaluator, optionally measured on a
//     device to confirm the prediction.
// Every step reads its state from the CampaignStore and commits what it did
// before the next, so a coordinator killed at any point resumes where it
// was: proposals are committed before they run, benchmark jobs carry the
// trial's idempotency key, and a trial interrupted while pruning or
// training is evaluated again from its pruned start.
#ifndef HILNAS_COORDINATOR_CAMPAIGN_RUNNER_H_
#define HILNAS_COORDINATOR_CAMPAIGN_RUNNER_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/campaign_plan.h"
#include "coordinator/campaign_store.h"
#include "coordinator/evaluators.h"
#include "coordinator/job_store.h"
#include "quality/trial_evaluator.h"
#include "util/clock.h"

namespace hilnas {

struct CampaignRunnerOptions {
  // Trial checkpoints go under work_dir/CAMPAIGN/trial-N (removed once done;
  // `hilnas export` prunes again on demand).
  std::string work_dir = "hilnas.work";
  int64_t idle_poll_ms = 250;  // how often waiting campaigns are looked at
  int k_folds = 5;             // stage-1 cross-validation
  // A campaign fails (with the reason) after this many steps in a row died
  // with the process, or returned an error.
  int max_step_crashes = 2;
  int max_step_errors = 3;
};

struct CampaignContext;

class CampaignRunner {
 public:
  // `campaigns`, `jobs` and `clock` are not owned and must outlive the runner.
  // Stage 2 gets each campaign's backbone from `load_backbone` and its
  // quality evaluator from `make_evaluator` (coordinator/evaluators.h).
  CampaignRunner(CampaignStore* campaigns, JobStore* jobs, const Clock* clock,
                 CampaignRunnerOptions options,
                 BackboneLoader load_backbone = DefaultBackboneLoader(),
                 EvaluatorFactory make_evaluator = DefaultEvaluatorFactory());
  ~CampaignRunner();

  // Steps every running campaign on a background thread until Stop().
  void Start();
  void Stop();
  // Wakes the thread (a campaign was started or resumed).
  void Poke();

  // One step of one campaign: commits a batch of proposals, advances
  // finished jobs, or evaluates one trial. Returns whether anything changed
  // (false: waiting for agents, or not running). Errors are recorded in the
  // campaign; those returned here are the store's.
  absl::StatusOr<bool> Step(const std::string& campaign);
  // Step, guarded: bracketed in the store (BeginStep/EndStep), exceptions
  // caught, repeated errors and repeated crashes fail the campaign with the
  // reason. Returns whether anything changed.
  bool GuardedStep(const std::string& campaign);
  // A campaign that is no longer running (stopped, failed) gets its stage-2
  // evaluations cancelled (scancel) and their trials back to PROPOSED (a
  // resume submits them again). The loop calls it; OK when nothing is out.
  absl::Status CancelEvaluations(const std::string& campaign);

 private:
  absl::StatusOr<CampaignContext*> Context(const CampaignRecord& record);

  // Stage 1 (latency): decisions come from PlanStage1 (campaign_plan.h);
  // each effect below commits before the next step.
  absl::Status StartStage1(CampaignRecord& record);
  absl::StatusOr<bool> Stage1(CampaignRecord& record, CampaignContext& ctx,
                              std::vector<Trial>& trials);
  absl::Status ShowStage1Progress(CampaignRecord& record, const StageTally& tally);
  absl::Status ProposeStage1Sobol(const CampaignRecord& record, CampaignContext& ctx,
                                  const StageTally& tally, int n);
  absl::Status ProposeUncertaintyBatch(const CampaignRecord& record, CampaignContext& ctx,
                                       const StageTally& tally, const std::vector<Trial>& trials);
  absl::Status StartStage2(CampaignRecord& record, const StageTally& tally,
                           const std::vector<Trial>& trials);

  // Stage 2 (quality and latency): decisions from PlanStage2.
  absl::StatusOr<bool> Stage2(CampaignRecord& record, CampaignContext& ctx,
                              std::vector<Trial>& trials);
  absl::Status ProposeStage2Batch(const CampaignRecord& record, const CampaignContext& ctx,
                                  const std::vector<Trial>& trials, const StageTally& tally,
                                  const Stage2Plan& plan);
  absl::Status EnsureEvaluator(const CampaignConfig& config, CampaignContext& ctx);
  // Where `trial`'s current attempt lives (checkpoint, output, logs).
  EvaluationTask Task(const CampaignContext& ctx, const Trial& trial) const;
  // Prunes a waiting trial and submits its first attempt.
  absl::Status StartEvaluation(const CampaignRecord& record, CampaignContext& ctx, Trial& trial,
                               std::vector<Trial>& trials);
  // Commits the attempt (the next one when `next`), submits it, commits the
  // handle. A failed submission counts as a failed attempt.
  absl::Status SubmitAttempt(const CampaignRecord& record, CampaignContext& ctx, Trial& trial,
                             std::vector<Trial>& trials, bool next);
  absl::Status RetryOrFail(const CampaignRecord& record, CampaignContext& ctx, Trial& trial,
                           std::vector<Trial>& trials, const std::string& why);
  absl::Status FailTrial(const CampaignRecord& record, Trial& trial, std::vector<Trial>& trials,
                         const std::string& why);
  absl::Status FinishEvaluation(const CampaignRecord& record, CampaignContext& ctx, Trial& trial,
                                const QualityResult& result, std::vector<Trial>& trials);
  // Polls every evaluation out, re-attaches those whose handle was never
  // recorded, and records what ended; true when anything did.
  absl::StatusOr<bool> PollEvaluations(const CampaignRecord& record, CampaignContext& ctx,
                                       std::vector<Trial>& trials);
  // Both stages.
  // Moves MEASURING trials whose jobs finished; true when any did.
  absl::StatusOr<bool> CollectMeasurements(std::vector<Trial>& trials);
  absl::Status SubmitMeasurement(const CampaignRecord& record, Trial& trial);
  // Fails the campaign when too many trials failed; true when it did.
  absl::StatusOr<bool> CheckFailures(const CampaignRecord& record,
                                     const std::vector<Trial>& trials);
  absl::Status FitLatencyModels(CampaignRecord& record, CampaignContext& ctx,
                                const std::vector<Trial>& trials, bool cross_validate);
  void Log(const std::string& campaign, const std::string& text);
  void Loop();

  CampaignStore* campaigns_;  // not owned
  JobStore* jobs_;            // not owned
  const Clock* clock_;        // not owned
  const CampaignRunnerOptions options_;
  const BackboneLoader load_backbone_;
  const EvaluatorFactory make_evaluator_;

  absl::Mutex step_mu_;  // one Step at a time
  std::map<std::string, std::unique_ptr<CampaignContext>> contexts_ ABSL_GUARDED_BY(step_mu_);
  std::map<std::string, int> step_errors_;  // consecutive failed steps; the runner thread's
  // Campaigns that may have evaluations out; until the first sweep after a
  // start (swept_, the runner thread's), all of them.
  std::set<std::string> in_flight_campaigns_ ABSL_GUARDED_BY(step_mu_);
  bool swept_ = false;
  std::map<std::string, std::string> cancel_errors_;  // the last, per campaign

  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool poked_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_CAMPAIGN_RUNNER_H_
