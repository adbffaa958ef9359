// Stage 2 of a campaign (MobileLLM-Flash Sec. 3.4): batches proposed by
// qNEHVI, pruned and evaluated (in process or on Slurm), retried, cancelled.
#include "coordinator/campaign_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/campaign_config.h"
#include "coordinator/campaign_plan.h"
#include "coordinator/campaign_report.h"
#include "coordinator/campaign_runner_internal.h"
#include "latency_model/dataset.h"
#include "latency_model/latency_model.h"
#include "pruner/backbone.h"
#include "search/search.h"
#include "search_space/counts.h"
#include "util/median.h"
#include "util/status_macros.h"

namespace hilnas {

namespace fs = std::filesystem;
using campaign_internal::DeviceClass;
using campaign_internal::FindTrial;
using campaign_internal::Measured;
using campaign_internal::MedianOrNan;
using campaign_internal::NewTrial;

namespace {

// The reference TTFT: the configured one, else the median of stage 1.
double ReferenceTtft(const CampaignConfig& c, const std::vector<Trial>& trials) {
  if (c.reference().ttft_ms() > 0) return c.reference().ttft_ms();
  std::vector<double> ttfts;
  for (const Trial& t : trials) {
    if (t.stage() == 1 && Measured(t)) ttfts.push_back(t.measured_ttft_ms());
  }
  return MedianOrNan(ttfts);
}

}  // namespace

absl::Status CampaignRunner::StartStage2(CampaignRecord& record, const StageTally& tally,
                                         const std::vector<Trial>& trials) {
  const CampaignConfig& c = record.config;
  std::vector<double> decodes, memory;
  for (const Trial& t : trials) {
    if (t.stage() != 1 || !Measured(t)) continue;
    decodes.push_back(t.latency().summaries(0).decode_median_ms_per_token());
    memory.push_back(t.memory_mb());
  }
  const double ref_ttft = ReferenceTtft(c, trials);
  record.reference = c.reference();
  record.reference.set_ttft_ms(ref_ttft);
  if (record.reference.decode_ms() <= 0) record.reference.set_decode_ms(MedianOrNan(decodes));
  if (record.reference.memory_mb() <= 0) record.reference.set_memory_mb(MedianOrNan(memory));
  record.stage = 2;
  record.message = "stage 2: quality and latency";
  HILNAS_RETURN_IF_ERROR(campaigns_->Update(record));
  Log(c.name(), absl::StrFormat("stage 1 done: %d latency points, CV R^2 %.3f (target %.2f), tau "
                                "%.3f; reference point loss %.3f, TTFT %.1f ms%s",
                                tally.done, record.cv_r2, c.stage1_target_r2(), record.cv_tau,
                                record.reference.loss(), ref_ttft,
                                c.reference().ttft_ms() > 0 ? "" : " (median of stage 1)"));
  Log(c.name(),
      absl::StrFormat("stage 2: %d trials in batches of %d, strategy %s (%d initial "
                      "Sobol)",
                      c.stage2_trials(), c.batch_size(), c.strategy(), c.stage2_initial_points()));
  return absl::OkStatus();
}

absl::Status CampaignRunner::ProposeUncertaintyBatch(const CampaignRecord& record,
                                                     CampaignContext& ctx, const StageTally& tally,
                                                     const std::vector<Trial>& trials) {
  const CampaignConfig& c = record.config;
  const double ref_ttft = ReferenceTtft(c, trials);
  HILNAS_ASSIGN_OR_RETURN(
      std::vector<Proposal> picks,
      ProposeLatencyBatch(*ctx.space, *ctx.ttft, ref_ttft, UncertaintyBatchSize(c, tally),
                          c.candidates(), c.seed(), tally.seen));
  std::vector<Trial> batch;
  for (const Proposal& p : picks) batch.push_back(NewTrial(1, p, c.ttft_prompt_tokens()));
  HILNAS_RETURN_IF_ERROR(campaigns_->AddTrials(c.name(), std::move(batch)).status());
  Log(c.name(), absl::StrFormat("stage 1: CV R^2 %.3f below %.2f; %zu more points where the model "
                                "is least sure under %.1f ms",
                                record.cv_r2, c.stage1_target_r2(), picks.size(), ref_ttft));
  return absl::OkStatus();
}

absl::Status CampaignRunner::EnsureEvaluator(const CampaignConfig& c, CampaignContext& ctx) {
  if (ctx.backbone == nullptr) {
    HILNAS_ASSIGN_OR_RETURN(ctx.backbone, load_backbone_(c));
  }
  if (ctx.evaluator == nullptr) {
    HILNAS_ASSIGN_OR_RETURN(ctx.evaluator, make_evaluator_(c, *ctx.backbone));
  }
  return absl::OkStatus();
}

EvaluationTask CampaignRunner::Task(const CampaignContext& ctx, const Trial& trial) const {
  const std::string root =
      ctx.evaluator->work_root().empty() ? options_.work_dir : ctx.evaluator->work_root();
  const fs::path dir = fs::path(root) / trial.campaign() / absl::StrCat("trial-", trial.id());
  EvaluationTask task;
  task.campaign = trial.campaign();
  task.trial = trial.id();
  task.attempt = std::max(1, trial.eval_attempt());
  task.checkpoint_dir = (dir / "checkpoint").string();
  task.work_dir = (dir / absl::StrCat("attempt-", task.attempt)).string();
  return task;
}

absl::Status CampaignRunner::StartEvaluation(const CampaignRecord& record, CampaignContext& ctx,
                                             Trial& trial, std::vector<Trial>& trials) {
  trial.set_state(PRUNING);
  HILNAS_RETURN_IF_ERROR(campaigns_->UpdateTrial(trial));
  absl::Status pruned = [&]() -> absl::Status {
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchFromProto(trial.arch()));
    PruneOptions po;
    po.block_size = ctx.space->block_size();
    return PruneToCheckpoint(*ctx.backbone, arch, po, Task(ctx, trial).checkpoint_dir);
  }();
  if (!pruned.ok()) return FailTrial(record, trial, trials, std::string(pruned.message()));
  return SubmitAttempt(record, ctx, trial, trials, /*next=*/true);
}

absl::Status CampaignRunner::SubmitAttempt(const CampaignRecord& record, CampaignContext& ctx,
                                           Trial& trial, std::vector<Trial>& trials, bool next) {
  // The attempt is committed before the job exists and its handle right
  // after, so a restart between the two finds the job by name (Find).
  if (next || trial.eval_attempt() == 0) trial.set_eval_attempt(trial.eval_attempt() + 1);
  trial.clear_eval_job();
  trial.set_eval_state("SUBMITTING");
  trial.clear_eval_node();
  trial.set_state(TRAINING);
  HILNAS_RETURN_IF_ERROR(campaigns_->UpdateTrial(trial));
  const EvaluationTask task = Task(ctx, trial);
  absl::StatusOr<std::string> handle = ctx.evaluator->Submit(task);
  if (!handle.ok()) {
    return RetryOrFail(record, ctx, trial, trials,
                       absl::StrCat("submitting failed: ", handle.status().message()));
  }
  trial.set_eval_job(*handle);
  trial.set_eval_state("SUBMITTED");
  HILNAS_RETURN_IF_ERROR(campaigns_->UpdateTrial(trial));
  Log(record.config.name(), absl::StrCat("trial ", trial.id(), " attempt ", task.attempt,
                                         ": evaluating as ", *handle, " (", task.JobName(), ")"));
  return absl::OkStatus();
}

absl::Status CampaignRunner::RetryOrFail(const CampaignRecord& record, CampaignContext& ctx,
                                         Trial& trial, std::vector<Trial>& trials,
                                         const std::string& why) {
  const int attempts = ctx.evaluator->max_attempts();
  if (trial.eval_attempt() < attempts) {
    Log(record.config.name(), absl::StrCat("trial ", trial.id(), " attempt ", trial.eval_attempt(),
                                           " of ", attempts, ": ", why, "; trying again"));
    return SubmitAttempt(record, ctx, trial, trials, /*next=*/true);
  }
  return FailTrial(record, trial, trials,
                   attempts > 1 ? absl::StrCat("after ", attempts, " attempts: ", why) : why);
}

absl::Status CampaignRunner::FailTrial(const CampaignRecord& record, Trial& t,
                                       std::vector<Trial>& trials, const std::string& why) {
  t.set_state(FAILED);
  t.set_message(why);
  t.set_finished_ms(clock_->NowMs());
  HILNAS_RETURN_IF_ERROR(campaigns_->UpdateTrial(t));
  Log(record.config.name(),
      absl::StrCat("trial ", t.id(), " (", ArchSummary(t.arch()), ") failed: ", why));
  return CheckFailures(record, trials).status();
}

absl::Status CampaignRunner::FinishEvaluation(const CampaignRecord& record, CampaignContext& ctx,
                                              Trial& t, const QualityResult& q,
                                              std::vector<Trial>& trials) {
  const CampaignConfig& c = record.config;
  if (!std::isfinite(q.loss)) {
    return FailTrial(record, t, trials, absl::StrCat("the evaluator returned loss ", q.loss));
  }
  t.set_loss(q.loss);
  t.set_initial_loss(q.initial_loss);
  t.set_quality_seconds(q.seconds);
  t.clear_task_scores();  // this evaluation's scores only
  MergeTaskScores(q.tasks, t);
  std::string score;
  if (!c.quality_task().empty()) {
    const TaskScore* s = FindTaskScore(t, c.quality_task());
    if (s == nullptr) {
      return FailTrial(record, t, trials,
                       absl::StrCat("the evaluator returned no score for quality_task \"",
                                    c.quality_task(), "\" (", t.task_scores_size(),
                                    " task scores; does its command pass {task_flags}?)"));
    }
    score = absl::StrFormat(", %s %s %.4f", s->task(), s->metric(), s->value());
  }
  if (c.confirm_latency()) {
    HILNAS_RETURN_IF_ERROR(SubmitMeasurement(record, t));
  } else {
    t.set_state(DONE);
    t.set_finished_ms(clock_->NowMs());
    HILNAS_RETURN_IF_ERROR(campaigns_->UpdateTrial(t));
  }
  std::error_code ec;  // `hilnas export` prunes again; nothing here is needed
  fs::remove_all(fs::path(Task(ctx, t).checkpoint_dir).parent_path(), ec);
  Log(c.name(),
      absl::StrFormat("trial %d (%s, %s): loss %.4f%s, predicted TTFT %.1f ms, %s params, %.1f s",
                      t.id(), t.provenance(), ArchSummary(t.arch()), t.loss(), score,
                      t.predicted_ttft_ms(), absl::StrCat(t.parameters()), t.quality_seconds()));
  return absl::OkStatus();
}

absl::StatusOr<bool> CampaignRunner::PollEvaluations(const CampaignRecord& record,
                                                     CampaignContext& ctx,
                                                     std::vector<Trial>& trials) {
  using Kind = EvaluationStatus::Kind;
  bool changed = false;
  for (Trial& t : trials) {
    if (t.stage() != 2 || t.state() != TRAINING) continue;
    const EvaluationTask task = Task(ctx, t);
    if (t.eval_job().empty()) {
      // The attempt was committed but its handle was not: the process died
      // between the two, or the submission itself. Re-attach, or submit.
      HILNAS_ASSIGN_OR_RETURN(std::string found, ctx.evaluator->Find(task));
      if (found.empty()) {
        HILNAS_RETURN_IF_ERROR(SubmitAttempt(record, ctx, t, trials, /*next=*/false));
      } else {
        t.set_eval_job(found);
        HILNAS_RETURN_IF_ERROR(campaigns_->UpdateTrial(t));
        Log(record.config.name(), absl::StrCat("trial ", t.id(), ": re-attached to ", found, " (",
                                               task.JobName(), "), whose id was not recorded"));
      }
      changed = true;
      continue;
    }
    HILNAS_ASSIGN_OR_RETURN(EvaluationStatus s, ctx.evaluator->Poll(task, t.eval_job()));
    switch (s.kind) {
      case Kind::kQueued:
      case Kind::kRunning:
        if (s.state != t.eval_state() || s.node != t.eval_node()) {
          t.set_eval_state(s.state);
          t.set_eval_node(s.node);
          HILNAS_RETURN_IF_ERROR(campaigns_->UpdateTrial(t));
        }
        break;
      case Kind::kDone:
        t.set_eval_state(s.state);
        t.set_eval_node(s.node);
        HILNAS_RETURN_IF_ERROR(FinishEvaluation(record, ctx, t, s.result, trials));
        changed = true;
        break;
      case Kind::kLost:
        // A thread of a process that is gone: evaluate again from the pruned
        // checkpoint (still on disk), as the same attempt.
        Log(record.config.name(),
            absl::StrCat("trial ", t.id(), ": ", s.message, "; evaluating it again"));
        HILNAS_RETURN_IF_ERROR(SubmitAttempt(record, ctx, t, trials, /*next=*/false));
        changed = true;
        break;
      case Kind::kRetry:
        t.set_eval_state(s.state);
        HILNAS_RETURN_IF_ERROR(RetryOrFail(record, ctx, t, trials, s.message));
        changed = true;
        break;
      case Kind::kFailed:
        t.set_eval_state(s.state);
        HILNAS_RETURN_IF_ERROR(FailTrial(record, t, trials, s.message));
        changed = true;
        break;
    }
    // A failed trial may have failed the campaign (CheckFailures): then stop
    // polling; a user's stop is seen by the caller after the loop.
    if (s.kind == Kind::kRetry || s.kind == Kind::kFailed) {
      HILNAS_ASSIGN_OR_RETURN(CampaignRecord now, campaigns_->Get(record.config.name()));
      if (now.state != CampaignState::kRunning) break;
    }
  }
  return changed;
}

absl::StatusOr<bool> CampaignRunner::Stage2(CampaignRecord& record, CampaignContext& ctx,
                                            std::vector<Trial>& trials) {
  const CampaignConfig& c = record.config;
  HILNAS_RETURN_IF_ERROR(FitLatencyModels(record, ctx, trials, /*cross_validate=*/false));
  HILNAS_RETURN_IF_ERROR(EnsureEvaluator(c, ctx));
  in_flight_campaigns_.insert(c.name());
  HILNAS_ASSIGN_OR_RETURN(bool polled, PollEvaluations(record, ctx, trials));
  HILNAS_ASSIGN_OR_RETURN(CampaignRecord now, campaigns_->Get(c.name()));
  if (now.state != CampaignState::kRunning) return true;
  // Start one waiting trial per step when a slot is free (pruning takes a
  // while; one per step so a stop is seen).
  const int max_in_flight = MaxInFlight(c, ctx.evaluator->capacity());
  StageTally tally = TallyStage(trials, 2);
  if (tally.waiting_id != 0 && tally.in_flight < max_in_flight) {
    HILNAS_RETURN_IF_ERROR(
        StartEvaluation(record, ctx, FindTrial(trials, tally.waiting_id), trials));
    return true;
  }
  HILNAS_ASSIGN_OR_RETURN(bool collected, CollectMeasurements(trials));
  HILNAS_ASSIGN_OR_RETURN(const Strategy strategy, ParseStrategy(c.strategy()));
  tally = TallyStage(trials, 2);
  const Stage2Plan plan = PlanStage2(c, strategy, tally, max_in_flight);
  switch (plan.kind) {
    case Stage2Plan::Kind::kWait:
      return polled || collected;
    case Stage2Plan::Kind::kComplete: {
      const std::string report = absl::StrCat("done: ", FrontSummary(record, trials));
      HILNAS_RETURN_IF_ERROR(campaigns_->Finish(c.name(), CampaignEvent::kComplete, report));
      Log(c.name(), report);
      return true;
    }
    case Stage2Plan::Kind::kPropose:
      break;
  }
  HILNAS_RETURN_IF_ERROR(ProposeStage2Batch(record, ctx, trials, tally, plan));
  return true;
}

absl::Status CampaignRunner::CancelEvaluations(const std::string& name) {
  absl::MutexLock lock(&step_mu_);
  HILNAS_ASSIGN_OR_RETURN(CampaignRecord record, campaigns_->Get(name));
  if (record.state == CampaignState::kRunning) return absl::OkStatus();
  HILNAS_ASSIGN_OR_RETURN(std::vector<Trial> trials, campaigns_->Trials(name));
  // Open evaluations, and those of trials a failed or finished campaign
  // abandoned with their jobs still out.
  std::vector<Trial*> out;
  for (Trial& t : trials) {
    if (t.stage() != 2) continue;
    if (t.state() == TRAINING || t.state() == PRUNING ||
        (t.state() == ABANDONED && !t.eval_job().empty())) {
      out.push_back(&t);
    }
  }
  if (out.empty()) {
    in_flight_campaigns_.erase(name);
    return absl::OkStatus();
  }
  HILNAS_ASSIGN_OR_RETURN(CampaignContext * ctx, Context(record));
  HILNAS_RETURN_IF_ERROR(EnsureEvaluator(record.config, *ctx));
  std::vector<std::string> cancelled;
  for (Trial* t : out) {
    std::string job = t->eval_job();
    if (job.empty() && t->state() == TRAINING) {
      HILNAS_ASSIGN_OR_RETURN(job, ctx->evaluator->Find(Task(*ctx, *t)));
    }
    if (!job.empty()) {
      HILNAS_RETURN_IF_ERROR(ctx->evaluator->Cancel(job));
      cancelled.push_back(job);
    }
    // Waits again: a resume prunes it and submits the next attempt.
    if (t->state() != ABANDONED) t->set_state(PROPOSED);
    t->clear_eval_job();
    t->set_eval_state(job.empty() ? "" : "CANCELLED");
    t->clear_eval_node();
    HILNAS_RETURN_IF_ERROR(campaigns_->UpdateTrial(*t));
  }
  in_flight_campaigns_.erase(name);
  Log(name,
      absl::StrCat("campaign ", CampaignStateName(record.state), ": ", out.size(),
                   " evaluations stopped",
                   cancelled.empty() ? "" : " (cancelled " + absl::StrJoin(cancelled, ", ") + ")",
                   "; they start again on resume"));
  return absl::OkStatus();
}

namespace {

// What the search sees of stage 2: observed losses, pending proposals, the
// fitted latency models and the reference point.
absl::StatusOr<SearchState> Stage2SearchState(const CampaignRecord& record,
                                              const CampaignContext& ctx,
                                              const std::vector<Trial>& trials) {
  const CampaignConfig& c = record.config;
  SearchState state;
  state.space = ctx.space.get();
  state.objectives = CampaignObjectives(c);
  state.prompt_tokens = c.ttft_prompt_tokens();
  state.ttft = ctx.ttft.get();
  state.decode = ctx.decode.get();
  state.reference = ReferenceVector(c, record.reference, state.objectives);
  for (const Trial& t : trials) {
    if (t.stage() != 2) continue;
    state.seen.insert(ArchKey(t.arch()));
    HILNAS_ASSIGN_OR_RETURN(Arch a, ArchFromProto(t.arch()));
    if (t.state() == DONE || (t.state() == MEASURING && t.loss() > 0)) {
      state.observed.push_back(a);
      state.observed_loss.push_back(QualityObjective(c, t));
    } else if (!TrialFinished(t.state())) {
      state.pending.push_back(a);
    }
  }
  return state;
}

}  // namespace

absl::Status CampaignRunner::ProposeStage2Batch(const CampaignRecord& record,
                                                const CampaignContext& ctx,
                                                const std::vector<Trial>& trials,
                                                const StageTally& tally, const Stage2Plan& plan) {
  const CampaignConfig& c = record.config;
  HILNAS_ASSIGN_OR_RETURN(const SearchState state, Stage2SearchState(record, ctx, trials));
  ProposeOptions po;
  po.strategy = plan.strategy;
  po.q = plan.q;
  po.candidates = c.candidates();
  po.mc_samples = c.mc_samples();
  po.seed = c.seed() + 1;  // stage 2's Sobol sequence differs from stage 1's
  po.round = static_cast<uint64_t>(tally.counted);
  po.gp.seed = c.seed();
  const auto t0 = std::chrono::steady_clock::now();
  HILNAS_ASSIGN_OR_RETURN(std::vector<Proposal> picks, ProposeBatch(state, po));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (picks.empty()) {
    return campaigns_->Finish(c.name(), CampaignEvent::kComplete,
                              absl::StrCat("done early: no unseen architecture left to propose; ",
                                           FrontSummary(record, trials)));
  }
  std::vector<Arch> archs;
  for (const Proposal& p : picks) archs.push_back(p.arch);
  HILNAS_ASSIGN_OR_RETURN(std::vector<LatencyPrediction> pred, ctx.ttft->Predict(archs));
  std::vector<Trial> batch;
  for (size_t i = 0; i < picks.size(); ++i) {
    Trial& t = batch.emplace_back(NewTrial(2, picks[i], c.ttft_prompt_tokens()));
    t.set_predicted_ttft_ms(pred[i].median_ms);
    t.set_predicted_ttft_log_sd(pred[i].log_sd);
    if (ctx.decode != nullptr) {
      HILNAS_ASSIGN_OR_RETURN(std::vector<LatencyPrediction> d,
                              ctx.decode->Predict({picks[i].arch}));
      t.set_predicted_decode_ms(d[0].median_ms);
    }
  }
  HILNAS_RETURN_IF_ERROR(campaigns_->AddTrials(c.name(), std::move(batch)).status());
  Log(c.name(),
      absl::StrFormat("stage 2: proposed %zu by %s over %zu observed trials in %.2f s",
                      picks.size(), StrategyName(po.strategy), state.observed.size(), secs));
  return absl::OkStatus();
}

}  // namespace hilnas
