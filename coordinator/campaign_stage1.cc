// Stage 1 of a campaign (MobileLLM-Flash Sec. 3.4): Sobol architectures
// measured by the agents, latency models fitted until good enough.
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

absl::Status CampaignRunner::StartStage1(CampaignRecord& record) {
  const CampaignConfig& c = record.config;
  record.stage = 1;
  record.message = "stage 1: measuring latency";
  HILNAS_RETURN_IF_ERROR(campaigns_->Update(record));
  Log(c.name(), absl::StrFormat("stage 1: %d Sobol points, then uncertainty batches of %d, up to "
                                "%d latency points or CV R^2 %.2f; TTFT at %d tokens on pool %s",
                                c.stage1_sobol_points(), c.batch_size(), c.stage1_latency_points(),
                                c.stage1_target_r2(), c.ttft_prompt_tokens(), DeviceClass(c)));
  return absl::OkStatus();
}

absl::Status CampaignRunner::SubmitMeasurement(const CampaignRecord& record, Trial& trial) {
  BenchmarkRequest request = record.config.benchmark();
  request.clear_prompt_lengths();
  request.add_prompt_lengths(record.config.ttft_prompt_tokens());
  *request.mutable_arch() = trial.arch();
  request.set_seed(record.config.seed());
  // The key makes a re-submission after a restart return the same job.
  HILNAS_ASSIGN_OR_RETURN(
      int64_t job,
      jobs_->SubmitJob(request, "", record.config.device_pool(),
                       absl::StrCat("campaign/", record.config.name(), "/trial/", trial.id())));
  trial.set_job_id(job);
  trial.set_state(MEASURING);
  return campaigns_->UpdateTrial(trial);
}

absl::StatusOr<bool> CampaignRunner::CollectMeasurements(std::vector<Trial>& trials) {
  bool changed = false;
  for (Trial& t : trials) {
    if (t.state() != MEASURING) continue;
    HILNAS_ASSIGN_OR_RETURN(JobRecord job, jobs_->GetJob(t.job_id()));
    if (job.state != JOB_DONE && job.state != JOB_FAILED) continue;
    changed = true;
    t.set_finished_ms(clock_->NowMs());
    if (job.state == JOB_DONE && job.result.has_value() && job.result->failure() == FAILURE_NONE &&
        job.result->summaries_size() > 0) {
      *t.mutable_latency() = *job.result;
      t.set_measured_ttft_ms(job.result->summaries(0).ttft_median_ms());
      t.set_state(DONE);
    } else {
      const std::string why =
          job.result.has_value() && !job.result->failure_message().empty()
              ? absl::StrCat(FailureKind_Name(job.result->failure()), ": ",
                             job.result->failure_message())
              : absl::StrCat("benchmark job ", t.job_id(), " failed: ", job.message);
      if (t.stage() == 2) {
        // The quality result stands; only the confirmation is missing.
        t.set_state(DONE);
        t.set_message(absl::StrCat("latency confirmation failed: ", why));
      } else {
        t.set_state(FAILED);
        t.set_message(why);
      }
    }
    HILNAS_RETURN_IF_ERROR(campaigns_->UpdateTrial(t));
    if (t.stage() == 2 && t.measured_ttft_ms() > 0) {
      Log(t.campaign(),
          absl::StrFormat("trial %d: measured TTFT %.1f ms vs predicted %.1f ms (gap %+.0f%%)",
                          t.id(), t.measured_ttft_ms(), t.predicted_ttft_ms(),
                          100 * (t.predicted_ttft_ms() / t.measured_ttft_ms() - 1)));
    } else if (t.state() == FAILED) {
      Log(t.campaign(), absl::StrCat("trial ", t.id(), " failed: ", t.message()));
    }
  }
  return changed;
}

absl::StatusOr<bool> CampaignRunner::CheckFailures(const CampaignRecord& record,
                                                   const std::vector<Trial>& trials) {
  const FailureCheck f =
      CheckStageFailures(record.config, record.stage, record.failures_count_after, trials);
  if (!f.stop) return false;
  const std::string report = absl::StrFormat(
      "stopped: %d of %d stage-%d trials failed%s, more than the limit of %.0f%% "
      "(max_failed_fraction); last error: %s",
      f.failed, f.finished, record.stage,
      record.failures_count_after > 0 ? " since the last resume" : "",
      100 * record.config.max_failed_fraction(), f.last);
  HILNAS_RETURN_IF_ERROR(campaigns_->Finish(record.config.name(), CampaignEvent::kFail, report));
  Log(record.config.name(), report);
  return true;
}

absl::Status CampaignRunner::FitLatencyModels(CampaignRecord& record, CampaignContext& ctx,
                                              const std::vector<Trial>& trials,
                                              bool cross_validate) {
  std::vector<LatencyRow> rows;
  size_t measured = 0;
  for (const Trial& t : trials) {
    if (!Measured(t)) continue;
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchFromProto(t.arch()));
    for (LatencyRow& r : LatencyRowsOf(arch, t.latency(), DeviceClass(record.config))) {
      rows.push_back(std::move(r));
    }
    ++measured;
  }
  if (ctx.ttft != nullptr && measured == ctx.measured_at_fit && !cross_validate) {
    return absl::OkStatus();
  }
  GpOptions gp;
  gp.seed = record.config.seed();
  const int prompt = record.config.ttft_prompt_tokens();
  HILNAS_ASSIGN_OR_RETURN(LatencyModel ttft,
                          LatencyModel::Fit(*ctx.space, DeviceClass(record.config),
                                            LatencyMetric::kTtft, prompt, rows, gp));
  ctx.ttft = std::make_unique<LatencyModel>(std::move(ttft));
  const std::vector<Objective> objectives = CampaignObjectives(record.config);
  if (std::count(objectives.begin(), objectives.end(), DECODE)) {
    HILNAS_ASSIGN_OR_RETURN(LatencyModel decode,
                            LatencyModel::Fit(*ctx.space, DeviceClass(record.config),
                                              LatencyMetric::kDecode, prompt, rows, gp));
    ctx.decode = std::make_unique<LatencyModel>(std::move(decode));
  }
  ctx.measured_at_fit = measured;
  if (!cross_validate) return absl::OkStatus();
  const auto t0 = std::chrono::steady_clock::now();
  HILNAS_ASSIGN_OR_RETURN(LatencyCv cv,
                          CrossValidateLatency(*ctx.ttft, rows, options_.k_folds, gp));
  record.cv_r2 = cv.r2;
  record.cv_tau = cv.tau;
  const GpHyperparameters& h = ctx.ttft->gp().hyperparameters();
  Log(record.config.name(),
      absl::StrFormat(
          "stage 1: latency model on %zu points: %d-fold CV R^2 %.3f (log %.3f), "
          "Kendall tau %.3f, RMSE %.2f ms; noise %.2e, outputscale %.2f (%.1f s)",
          measured, std::min<int>(options_.k_folds, measured), cv.r2, cv.r2_log, cv.tau, cv.rmse_ms,
          h.noise, h.outputscale,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  return absl::OkStatus();
}

absl::StatusOr<bool> CampaignRunner::Stage1(CampaignRecord& record, CampaignContext& ctx,
                                            std::vector<Trial>& trials) {
  const CampaignConfig& c = record.config;
  StageTally tally = TallyStage(trials, 1);
  bool collected = false;
  if (tally.proposed_id == 0) {
    HILNAS_ASSIGN_OR_RETURN(collected, CollectMeasurements(trials));
    if (collected) {
      HILNAS_ASSIGN_OR_RETURN(bool failed, CheckFailures(record, trials));
      if (failed) return true;
      tally = TallyStage(trials, 1);
    }
  }
  const Stage1Plan plan = PlanStage1(c, tally);
  switch (plan.kind) {
    case Stage1Plan::Kind::kSubmit:
      HILNAS_RETURN_IF_ERROR(SubmitMeasurement(record, FindTrial(trials, plan.trial)));
      return true;
    case Stage1Plan::Kind::kWait:
      HILNAS_RETURN_IF_ERROR(ShowStage1Progress(record, tally));
      return collected;
    case Stage1Plan::Kind::kTooFew:
      HILNAS_RETURN_IF_ERROR(campaigns_->Finish(
          c.name(), CampaignEvent::kFail,
          absl::StrCat("stage 1: only ", tally.done, " of ", tally.total,
                       " latency measurements succeeded; a GP needs ", kMinLatencyPoints)));
      return true;
    case Stage1Plan::Kind::kSobol:
      HILNAS_RETURN_IF_ERROR(ProposeStage1Sobol(record, ctx, tally, plan.n));
      return true;
    case Stage1Plan::Kind::kFit:
      break;
  }
  HILNAS_RETURN_IF_ERROR(FitLatencyModels(record, ctx, trials, /*cross_validate=*/true));
  if (Stage1Finished(c, tally, record.cv_r2)) {
    HILNAS_RETURN_IF_ERROR(StartStage2(record, tally, trials));
  } else {
    HILNAS_RETURN_IF_ERROR(ProposeUncertaintyBatch(record, ctx, tally, trials));
  }
  return true;
}

absl::Status CampaignRunner::ShowStage1Progress(CampaignRecord& record, const StageTally& tally) {
  const std::string waiting =
      absl::StrFormat("stage 1: %d latency jobs out, %d measured of %d", tally.open, tally.done,
                      record.config.stage1_latency_points());
  if (record.message == waiting) return absl::OkStatus();
  record.message = waiting;
  return campaigns_->Update(record);
}

absl::Status CampaignRunner::ProposeStage1Sobol(const CampaignRecord& record, CampaignContext& ctx,
                                                const StageTally& tally, int n) {
  const CampaignConfig& c = record.config;
  HILNAS_ASSIGN_OR_RETURN(std::vector<Arch> archs, FreshSobol(*ctx.space, n, c.seed(), tally.seen));
  std::vector<Trial> batch;
  for (const Arch& a : archs) {
    batch.push_back(NewTrial(1, {a, Provenance::kSobol, 0}, c.ttft_prompt_tokens()));
  }
  HILNAS_RETURN_IF_ERROR(campaigns_->AddTrials(c.name(), std::move(batch)).status());
  Log(c.name(),
      absl::StrFormat("stage 1: proposed %zu Sobol architectures for latency", archs.size()));
  return absl::OkStatus();
}

}  // namespace hilnas
