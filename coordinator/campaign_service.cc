#include "coordinator/campaign_service.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/campaign_config.h"
#include "coordinator/campaign_report.h"
#include "search_space/space.h"
#include "quality/evaluator.h"
#include "quality/tasks.h"
#include "util/status_macros.h"

namespace hilnas {

absl::StatusOr<CampaignStatus> DescribeCampaign(CampaignStore& store, const std::string& name,
                                                int log_lines) {
  HILNAS_ASSIGN_OR_RETURN(CampaignRecord r, store.Get(name));
  HILNAS_ASSIGN_OR_RETURN(std::vector<Trial> trials, store.Trials(name));
  HILNAS_ASSIGN_OR_RETURN(std::vector<LogLine> log, store.LogLines(name, log_lines));
  CampaignStatus s;
  s.set_name(name);
  s.set_state(std::string(CampaignStateName(r.state)));
  s.set_stage(r.stage);
  s.set_message(r.message);
  for (const Trial& t : trials) {
    if (t.stage() == 1 && t.state() == DONE) s.set_latency_points(s.latency_points() + 1);
    if (t.stage() != 2) continue;
    s.set_trials_total(s.trials_total() + 1);
    if (t.state() == DONE) s.set_trials_done(s.trials_done() + 1);
    if (t.state() == FAILED) s.set_trials_failed(s.trials_failed() + 1);
    if (t.state() == TRAINING) {
      s.add_in_flight(absl::StrCat("trial ", t.id(), " attempt ", std::max(1, t.eval_attempt()),
                                   ": ", EvaluationSummary(t)));
    }
  }
  if (!std::isnan(r.cv_r2)) s.set_cv_r2(r.cv_r2);
  if (!std::isnan(r.cv_tau)) s.set_cv_tau(r.cv_tau);
  *s.mutable_reference() = r.reference;
  const FrontView front = ComputeFront(r, trials);
  s.set_hypervolume(front.hypervolume);
  s.set_front_size(
      static_cast<int>(std::count(front.on_front.begin(), front.on_front.end(), true)));
  for (const LogLine& l : log) s.add_log(l.text);
  *s.mutable_config() = r.config;
  s.set_deployment(DeploymentSummary(r.config));
  return s;
}

absl::StatusOr<CampaignStatus> CampaignServiceImpl::Create(const CampaignConfig& config) {
  const CampaignConfig c = WithCampaignDefaults(config);
  const std::string where = absl::StrCat("campaign \"", c.name(), "\"");
  // What the network may not ask for is refused before anything else looks
  // at the config (no file named by it is opened before its path is checked).
  const std::string& evaluator = c.quality_evaluator();
  if (evaluator != "in-process" && policy_.evaluators.count(evaluator) == 0) {
    std::string known = "in-process";
    for (const auto& [name, command] : policy_.evaluators) absl::StrAppend(&known, ", ", name);
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": quality_evaluator: \"", evaluator,
        "\" is not an evaluator this coordinator defines (", known,
        "); a config names an evaluator, commands are defined only on the coordinator's command "
        "line (--evaluator NAME=TEMPLATE)"));
  }
  for (const auto& [field, path] :
       {std::pair<const char*, const std::string&>{"backbone_checkpoint", c.backbone_checkpoint()},
        {"backbone_metrics", c.backbone_metrics()},
        {"tokens", c.tokens()}}) {
    if (absl::Status s = policy_.data_roots.Check(field, path); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
  }
  // Task configs and the data they name: inside the roots too, checked
  // before the data file is opened.
  for (int i = 0; i < c.tasks_size(); ++i) {
    const std::string field = absl::StrCat("tasks[", i, "]");
    if (absl::Status s = TaskFlags({c.tasks(i)}, 0, "", "").status(); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": tasks: ", s.message()));
    }
    if (absl::Status s = policy_.data_roots.Check(field, c.tasks(i)); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
    absl::StatusOr<std::vector<std::string>> data = TaskDataPaths(c.tasks(i));
    if (!data.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", field, ": ", data.status().message()));
    }
    for (const std::string& path : *data) {
      if (absl::Status s = policy_.data_roots.Check(field + " data", path); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
      }
    }
  }
  HILNAS_ASSIGN_OR_RETURN(std::vector<CampaignRecord> existing, store_->List());
  if (static_cast<int>(existing.size()) >= policy_.max_campaigns) {
    return absl::ResourceExhaustedError(absl::StrCat(where, ": this coordinator already holds ",
                                                     existing.size(),
                                                     " campaigns, its limit (--max-campaigns)"));
  }
  HILNAS_RETURN_IF_ERROR(ValidateCampaignConfig(c, where));
  HILNAS_RETURN_IF_ERROR(store_->Create(c));
  store_
      ->Log(c.name(), absl::StrFormat("created: space of %s members, strategy %s, q %d",
                                      absl::StrCat(Space::FromProto(c.search_space())->Size()),
                                      c.strategy(), c.batch_size()))
      .IgnoreError();
  return DescribeCampaign(*store_, c.name());
}

absl::StatusOr<CampaignStatus> CampaignServiceImpl::Start(const std::string& name) {
  HILNAS_RETURN_IF_ERROR(store_->SetState(name, CampaignEvent::kStart, "starting"));
  store_->Log(name, "started").IgnoreError();
  runner_->Poke();
  return DescribeCampaign(*store_, name);
}

absl::StatusOr<CampaignStatus> CampaignServiceImpl::Get(const std::string& name) {
  return DescribeCampaign(*store_, name);
}

absl::StatusOr<std::vector<CampaignStatus>> CampaignServiceImpl::List() {
  HILNAS_ASSIGN_OR_RETURN(std::vector<CampaignRecord> all, store_->List());
  std::vector<CampaignStatus> out;
  for (const CampaignRecord& r : all) {
    HILNAS_ASSIGN_OR_RETURN(CampaignStatus s, DescribeCampaign(*store_, r.config.name(), 0));
    s.clear_config();
    out.push_back(std::move(s));
  }
  return out;
}

absl::StatusOr<CampaignStatus> CampaignServiceImpl::Stop(const std::string& name) {
  HILNAS_RETURN_IF_ERROR(store_->SetState(name, CampaignEvent::kStop, "stopped by the user"));
  store_->Log(name, "stopped by the user").IgnoreError();
  runner_->Poke();  // its evaluations out are cancelled on the runner's next pass
  return DescribeCampaign(*store_, name);
}

absl::StatusOr<CampaignStatus> CampaignServiceImpl::Resume(const std::string& name) {
  HILNAS_ASSIGN_OR_RETURN(CampaignRecord r, store_->Get(name));
  if (absl::StatusOr<CampaignState> next = NextCampaignState(r.state, CampaignEvent::kResume);
      !next.ok()) {
    return absl::FailedPreconditionError(absl::StrCat("campaign \"", name, "\" is ",
                                                      CampaignStateName(r.state),
                                                      "; only a stopped or failed one resumes"));
  }
  HILNAS_ASSIGN_OR_RETURN(std::vector<Trial> trials, store_->Trials(name));
  // Failures so far were seen by the user; the limit applies to what follows.
  int forgiven = 0;
  for (const Trial& t : trials) {
    if (t.state() == FAILED || t.state() == DONE) {
      r.failures_count_after = std::max(r.failures_count_after, t.id());
    }
    forgiven += t.state() == FAILED;
  }
  HILNAS_RETURN_IF_ERROR(store_->Update(r));
  HILNAS_RETURN_IF_ERROR(store_->SetState(name, CampaignEvent::kResume, "resumed"));
  store_->Log(name, absl::StrCat("resumed (", forgiven, " earlier failures no longer count)"))
      .IgnoreError();
  runner_->Poke();
  return DescribeCampaign(*store_, name);
}

}  // namespace hilnas
