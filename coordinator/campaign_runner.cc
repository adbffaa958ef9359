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
namespace campaign_internal {

std::string DeviceClass(const CampaignConfig& c) {
  return c.device_pool().empty() ? "any" : c.device_pool();
}

double MedianOrNan(std::vector<double> v) { return v.empty() ? NAN : Median(std::move(v)); }

// A new trial of `stage` proposing `p`, with its exact counts.
Trial NewTrial(int stage, const Proposal& p, int prompt_tokens) {
  Trial t;
  t.set_stage(stage);
  *t.mutable_arch() = ArchToProto(p.arch);
  t.set_state(PROPOSED);
  t.set_provenance(std::string(ProvenanceName(p.provenance)));
  t.set_acquisition(p.acquisition);
  t.set_parameters(CountParameters(p.arch).model());
  t.set_memory_mb(MemoryMb(p.arch, prompt_tokens));
  return t;
}

// The trial numbered `id`, which the caller knows is in `trials`.
Trial& FindTrial(std::vector<Trial>& trials, int64_t id) {
  return *std::find_if(trials.begin(), trials.end(), [id](const Trial& t) { return t.id() == id; });
}

bool Measured(const Trial& t) {
  return t.state() != FAILED && t.has_latency() && t.measured_ttft_ms() > 0;
}

}  // namespace campaign_internal

namespace fs = std::filesystem;
using campaign_internal::DeviceClass;
using campaign_internal::FindTrial;
using campaign_internal::Measured;
using campaign_internal::MedianOrNan;
using campaign_internal::NewTrial;

CampaignRunner::CampaignRunner(CampaignStore* campaigns, JobStore* jobs, const Clock* clock,
                               CampaignRunnerOptions options, BackboneLoader load_backbone,
                               EvaluatorFactory make_evaluator)
    : campaigns_(campaigns),
      jobs_(jobs),
      clock_(clock),
      options_(std::move(options)),
      load_backbone_(std::move(load_backbone)),
      make_evaluator_(std::move(make_evaluator)) {}

CampaignRunner::~CampaignRunner() { Stop(); }

void CampaignRunner::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void CampaignRunner::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void CampaignRunner::Poke() {
  absl::MutexLock lock(&mu_);
  poked_ = true;
}

void CampaignRunner::Loop() {
  while (true) {
    bool progressed = false;
    absl::StatusOr<std::vector<CampaignRecord>> all = campaigns_->List();
    if (all.ok()) {
      for (const CampaignRecord& r : *all) {
        {
          absl::MutexLock lock(&mu_);
          if (stop_) return;
        }
        if (r.state != CampaignState::kRunning) {
          // Stopped or failed with evaluations out (seen once per campaign
          // after a start, then whenever stage 2 ran here): cancel them.
          bool maybe_out = !swept_;
          if (!maybe_out) {
            absl::MutexLock lock(&step_mu_);
            maybe_out = in_flight_campaigns_.count(r.config.name()) > 0;
          }
          if (maybe_out) {
            absl::Status s = CancelEvaluations(r.config.name());
            std::string& last = cancel_errors_[r.config.name()];
            if (!s.ok() && std::string(s.message()) != last) {  // retried each loop, logged once
              Log(r.config.name(), absl::StrCat("cancelling evaluations: ", s.message()));
            }
            last = std::string(s.message());
          }
          continue;
        }
        progressed = GuardedStep(r.config.name()) || progressed;
      }
    }
    swept_ = swept_ || all.ok();
    absl::MutexLock lock(&mu_);
    if (stop_) return;
    if (!progressed) {
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || poked_; };
      mu_.AwaitWithTimeout(absl::Condition(&woken), absl::Milliseconds(options_.idle_poll_ms));
    }
    poked_ = false;
  }
}

void CampaignRunner::Log(const std::string& campaign, const std::string& text) {
  campaigns_->Log(campaign, text).IgnoreError();  // the log is best effort; state is not
}

absl::StatusOr<CampaignContext*> CampaignRunner::Context(const CampaignRecord& record) {
  auto& slot = contexts_[record.config.name()];
  if (slot == nullptr) {
    auto ctx = std::make_unique<CampaignContext>();
    HILNAS_ASSIGN_OR_RETURN(Space space, Space::FromProto(record.config.search_space()));
    ctx->space = std::make_unique<Space>(std::move(space));
    slot = std::move(ctx);
  }
  return slot.get();
}

bool CampaignRunner::GuardedStep(const std::string& name) {
  auto fail = [&](const std::string& why) {
    Log(name, why);
    campaigns_->Finish(name, CampaignEvent::kFail, why).IgnoreError();
  };
  // Marked in the file before the step runs: a step that kills the process
  // (std::bad_alloc from a poison budget, a segfault in a library) is seen
  // after the restart, and the campaign fails instead of killing it again.
  absl::StatusOr<int> crashes = campaigns_->BeginStep(name);
  if (!crashes.ok()) return false;  // the store is unwell: try again later
  absl::StatusOr<bool> progressed = false;
  if (*crashes >= options_.max_step_crashes) {
    fail(absl::StrCat("the coordinator died ", *crashes,
                      " times in a row during a step of this campaign; it is marked failed so it "
                      "cannot take the coordinator down again (`campaign resume` retries)"));
    progressed = true;
  } else {
    try {
      progressed = Step(name);
    } catch (const std::exception& e) {  // std::bad_alloc, c10::Error, json errors ...
      progressed = absl::InternalError(absl::StrCat("a runner step threw: ", e.what()));
      step_errors_[name] = options_.max_step_errors;  // no retry: it would throw again
    }
  }
  campaigns_->EndStep(name).IgnoreError();
  if (progressed.ok()) {
    step_errors_[name] = 0;
    return *progressed;
  }
  // A store error may pass (a busy database); the same error again and
  // again fails the campaign with the reason instead of spinning.
  if (++step_errors_[name] < options_.max_step_errors) return false;
  fail(absl::StrCat("stopped by an error: ", progressed.status().ToString()));
  step_errors_[name] = 0;
  return true;
}

absl::StatusOr<bool> CampaignRunner::Step(const std::string& name) {
  absl::MutexLock lock(&step_mu_);
  HILNAS_ASSIGN_OR_RETURN(CampaignRecord record, campaigns_->Get(name));
  if (record.state != CampaignState::kRunning) return false;
  absl::StatusOr<CampaignContext*> ctx = Context(record);
  if (!ctx.ok()) {
    HILNAS_RETURN_IF_ERROR(
        campaigns_->Finish(name, CampaignEvent::kFail, std::string(ctx.status().message())));
    return true;
  }
  HILNAS_ASSIGN_OR_RETURN(std::vector<Trial> trials, campaigns_->Trials(name));
  if (record.stage == 0) {
    HILNAS_RETURN_IF_ERROR(StartStage1(record));
    return true;
  }
  if (record.stage == 1) return Stage1(record, **ctx, trials);
  return Stage2(record, **ctx, trials);
}

}  // namespace hilnas
