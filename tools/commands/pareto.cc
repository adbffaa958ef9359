// `hilnas pareto show|export|plot|report`: a campaign's Pareto front, read
// straight from the coordinator's SQLite file (so it works after it has
// stopped); `report --task` scores the front's candidates on downstream
// tasks through the campaign's own evaluator and keeps the scores with the
// trials.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "coordinator/campaign_report.h"
#include "coordinator/evaluators.h"
#include "pruner/prune.h"
#include "quality/evaluator.h"
#include "quality/tasks.h"
#include "util/clock.h"
#include "latency_model/latency_model.h"
#include "search_space/shapes.h"
#include "tools/campaign_db.h"
#include "tools/commands/commands.h"
#include "util/files.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {

struct ParetoOptions {
  std::string verb;  // show | export | plot | report
  std::string campaign;
  std::string db = "hilnas.db";
  bool all = false;
  std::string format = "csv";
  std::string out;
  // report
  std::vector<std::string> tasks;
  int64_t limit = 0;
  std::vector<std::string> evaluators;  // NAME=DEFINITION, as the coordinator's
  std::string work_dir = "hilnas-report";
};

namespace fs = std::filesystem;

absl::Status WriteOrPrint(const std::string& out, const std::string& text);

// One front candidate's evaluation while `report` runs.
struct ReportJob {
  Trial* trial = nullptr;
  EvaluationTask task;
  std::string handle;
  std::string state;
  bool finished = false;
  std::string failure;
};

// Runs `jobs` through `evaluator`, at most its capacity at once, with
// progress on stderr; each finished one's scores go into its trial and the
// store. A job that fails counts in `failed`; an error of the evaluator or
// the store ends the run.
absl::Status RunReportJobs(TrialEvaluator& evaluator, CampaignStore& store,
                           std::vector<ReportJob>& jobs, int& done, int& failed) {
  const int capacity = evaluator.capacity() > 0 ? evaluator.capacity() : static_cast<int>(jobs.size());
  int running = 0;
  size_t next = 0;
  using Kind = EvaluationStatus::Kind;
  auto fail = [&](ReportJob& j, const std::string& why) {
    j.finished = true;
    j.failure = why;
    ++failed;
    std::fprintf(stderr, "trial %lld failed: %s\n", static_cast<long long>(j.trial->id()),
                 why.c_str());
  };
  while (done + failed < static_cast<int>(jobs.size())) {
    while (running < capacity && next < jobs.size()) {
      ReportJob& j = jobs[next++];
      absl::StatusOr<std::string> handle = evaluator.Submit(j.task);
      if (!handle.ok()) {
        fail(j, absl::StrCat("submitting failed: ", handle.status().message()));
        continue;
      }
      j.handle = *handle;
      ++running;
      std::fprintf(stderr, "trial %lld (%s): evaluating as %s\n",
                   static_cast<long long>(j.trial->id()), ArchSummary(j.trial->arch()).c_str(),
                   j.handle.c_str());
    }
    bool changed = false;
    for (ReportJob& j : jobs) {
      if (j.handle.empty() || j.finished) continue;
      HILNAS_ASSIGN_OR_RETURN(EvaluationStatus s, evaluator.Poll(j.task, j.handle));
      if (s.state != j.state) {
        j.state = s.state;
        std::fprintf(stderr, "trial %lld: %s%s\n", static_cast<long long>(j.trial->id()),
                     s.state.c_str(), s.node.empty() ? "" : (" on " + s.node).c_str());
      }
      if (s.kind == Kind::kQueued || s.kind == Kind::kRunning) continue;
      changed = true;
      if (s.kind == Kind::kRetry && j.task.attempt < evaluator.max_attempts()) {
        ++j.task.attempt;
        j.task.work_dir =
            (fs::path(j.task.work_dir).parent_path() / absl::StrCat("attempt-", j.task.attempt))
                .string();
        absl::StatusOr<std::string> handle = evaluator.Submit(j.task);
        if (!handle.ok()) {
          --running;
          fail(j, absl::StrCat("submitting failed: ", handle.status().message()));
          continue;
        }
        j.handle = *handle;
        std::fprintf(stderr, "trial %lld: %s; attempt %d as %s\n",
                     static_cast<long long>(j.trial->id()), s.message.c_str(), j.task.attempt,
                     j.handle.c_str());
        continue;
      }
      --running;
      if (s.kind != Kind::kDone) {
        fail(j, s.message.empty() ? s.state : s.message);
        continue;
      }
      if (s.result.tasks.empty()) {
        fail(j, "the evaluator returned no task scores (does its command pass {task_flags}?)");
        continue;
      }
      j.finished = true;
      // The new scores replace the trial's old ones of the same task and
      // metric; others stay.
      Trial& t = *j.trial;
      MergeTaskScores(s.result.tasks, t);
      HILNAS_RETURN_IF_ERROR(store.UpdateTrial(t));
      ++done;
      std::string line;
      for (const TaskScoreValue& v : s.result.tasks) {
        absl::StrAppend(&line, line.empty() ? "" : ", ", v.task, " ", v.metric, " ",
                        absl::StrFormat("%.4f", v.value));
      }
      std::fprintf(stderr, "trial %lld done (%d/%zu): %s (loss after this training %.4f)\n",
                   static_cast<long long>(t.id()), done + failed, jobs.size(), line.c_str(),
                   s.result.loss);
    }
    if (!changed) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return absl::OkStatus();
}

// Scores the front's candidates (every evaluated trial with --all) on the
// tasks: each is pruned from the backbone, trained and scored by the
// campaign's evaluator (in process, a command, or Slurm jobs), as stage 2
// evaluated it, and its scores are written into its trial.
absl::Status RunReport(const ParetoOptions& cl) {
  if (cl.tasks.empty()) return absl::InvalidArgumentError("pareto report needs --task CONFIG...");
  std::map<std::string, std::string> definitions;
  for (const std::string& e : cl.evaluators) {
    const size_t eq = e.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--evaluator \"", e, "\": want NAME=TEMPLATE or NAME=slurm:FILE"));
    }
    HILNAS_RETURN_IF_ERROR(CheckEvaluatorDefinition(e.substr(0, eq), e.substr(eq + 1)));
    definitions[e.substr(0, eq)] = e.substr(eq + 1);
  }
  SystemClock clock;
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<CampaignStore> store, OpenCampaignDb(cl.db, &clock));
  HILNAS_ASSIGN_OR_RETURN(CampaignRecord record, store->Get(cl.campaign));
  HILNAS_ASSIGN_OR_RETURN(std::vector<Trial> trials, store->Trials(cl.campaign));
  // The campaign's evaluator, asked for these tasks.
  CampaignConfig config = record.config;
  config.clear_tasks();
  for (const std::string& t : cl.tasks) {
    config.add_tasks(fs::absolute(t).lexically_normal().string());
  }
  config.set_task_limit(static_cast<int32_t>(std::min<int64_t>(cl.limit, INT32_MAX)));
  {
    // Every config and its data are read before anything trains.
    const std::vector<std::string> paths(config.tasks().begin(), config.tasks().end());
    HILNAS_RETURN_IF_ERROR(TaskFlags(paths, config.task_limit(), "", "").status());
    for (const std::string& p : paths) HILNAS_RETURN_IF_ERROR(LoadTask(p, 8).status());
  }
  const FrontView front = ComputeFront(record, trials);
  std::vector<ReportJob> jobs;
  for (size_t i = 0; i < front.evaluated.size(); ++i) {
    if (!cl.all && !front.on_front[i]) continue;
    ReportJob j;
    j.trial = &trials[front.evaluated[i] - trials.data()];  // evaluated points into trials
    jobs.push_back(std::move(j));
  }
  if (jobs.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("campaign \"", cl.campaign, "\" has no evaluated stage-2 trial yet"));
  }
  std::fprintf(stderr, "scoring %zu candidates of %s on %d task(s) with evaluator \"%s\"\n",
               jobs.size(), cl.campaign.c_str(), config.tasks_size(),
               config.quality_evaluator().c_str());
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<Backbone> backbone, DefaultBackboneLoader()(config));
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<TrialEvaluator> evaluator,
                          DefaultEvaluatorFactory(definitions)(config, *backbone));
  const std::string root = evaluator->work_root().empty() ? cl.work_dir : evaluator->work_root();
  // Job names and folders of their own: "C-report" never meets the
  // campaign's "hilnas-C-N-A" jobs.
  const std::string tag = absl::StrCat(cl.campaign, "-report");
  for (ReportJob& j : jobs) {
    const fs::path dir = fs::path(root) / tag / absl::StrCat("trial-", j.trial->id());
    j.task.campaign = tag;
    j.task.trial = j.trial->id();
    j.task.attempt = 1;
    j.task.checkpoint_dir = (dir / "checkpoint").string();
    j.task.work_dir = (dir / "attempt-1").string();
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ArchFromProto(j.trial->arch()));
    PruneOptions po;
    po.block_size = config.search_space().block_size();
    HILNAS_RETURN_IF_ERROR(PruneToCheckpoint(*backbone, arch, po, j.task.checkpoint_dir));
  }
  int done = 0, failed = 0;
  absl::Status ran = RunReportJobs(*evaluator, *store, jobs, done, failed);
  if (!ran.ok()) {
    // What is still out is stopped (a Slurm job would run on unwatched).
    for (const ReportJob& j : jobs) {
      if (!j.handle.empty() && !j.finished) evaluator->Cancel(j.handle).IgnoreError();
    }
    return ran;
  }
  std::error_code ec;
  for (const ReportJob& j : jobs) {
    if (j.failure.empty()) fs::remove_all(fs::path(j.task.checkpoint_dir).parent_path(), ec);
  }
  std::printf("campaign %s: %s\n\n%s", cl.campaign.c_str(), FrontSummary(record, trials).c_str(),
              ParetoTable(record, trials, false).c_str());
  if (!cl.out.empty()) HILNAS_RETURN_IF_ERROR(WriteOrPrint(cl.out, ParetoCsv(record, trials)));
  if (failed > 0) {
    return absl::InternalError(absl::StrCat(failed, " of ", jobs.size(),
                                            " candidates could not be scored (see above)"));
  }
  return absl::OkStatus();
}

// Published shapes that are members of the campaign's space, at their
// predicted TTFT (a latency model fitted on the campaign's measurements).
std::vector<std::pair<std::string, double>> PublishedMarkers(const LoadedCampaign& c) {
  std::vector<std::pair<std::string, double>> out;
  absl::StatusOr<std::vector<Shape>> shapes = PublishedShapes();
  absl::StatusOr<Space> space = Space::FromProto(c.record.config.search_space());
  if (!shapes.ok() || !space.ok()) return out;
  std::vector<Arch> members;
  std::vector<std::string> names;
  for (const Shape& s : *shapes) {
    if (space->Contains(s.arch).ok()) members.push_back(s.arch), names.push_back(s.name);
  }
  if (members.empty()) return out;
  absl::StatusOr<std::vector<LatencyRow>> rows = CampaignLatencyRows(c);
  if (!rows.ok()) return out;
  absl::StatusOr<LatencyModel> m = LatencyModel::Fit(*space, "campaign", LatencyMetric::kTtft,
                                                     c.record.config.ttft_prompt_tokens(), *rows);
  if (!m.ok()) return out;
  absl::StatusOr<std::vector<LatencyPrediction>> p = m->Predict(members);
  if (!p.ok()) return out;
  for (size_t i = 0; i < members.size(); ++i) out.push_back({names[i], (*p)[i].median_ms});
  return out;
}

absl::Status WriteOrPrint(const std::string& out, const std::string& text) {
  if (out.empty()) {
    std::fputs(text.c_str(), stdout);
    return absl::OkStatus();
  }
  HILNAS_RETURN_IF_ERROR(WriteFileAtomically(out, text));
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return absl::OkStatus();
}

int RunPareto(const ParetoOptions& cl) {
  if (cl.verb == "report") return ExitCode(RunReport(cl));
  absl::StatusOr<LoadedCampaign> c = LoadCampaignFromDb(cl.db, cl.campaign);
  if (!c.ok()) return Fail(c.status());
  const std::string out = cl.out;
  if (cl.verb == "show") {
    std::printf("campaign %s: %s, stage %d; %s\n%s\n\n", cl.campaign.c_str(),
                std::string(CampaignStateName(c->record.state)).c_str(), c->record.stage,
                FrontSummary(c->record, c->trials).c_str(),
                DeploymentSummary(c->record.config).c_str());
    std::printf("%s", ParetoTable(c->record, c->trials, cl.all).c_str());
    return 0;
  }
  if (cl.verb == "export") {
    const std::string format = cl.format;
    const std::string text =
        format == "csv" ? ParetoCsv(c->record, c->trials) : ParetoJson(c->record, c->trials);
    absl::Status s = WriteOrPrint(out, text);
    return s.ok() ? 0 : Fail(s);
  }
  if (out.empty()) return Fail(absl::InvalidArgumentError("pareto plot needs --out FILE.svg"));
  absl::Status s = WriteOrPrint(out, ParetoSvg(c->record, c->trials, PublishedMarkers(*c)));
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

void AddParetoCommand(Cli& cli) {
  auto [app, o] = cli.Add<ParetoOptions>(
      "pareto",
      "show CAMPAIGN [--db FILE --all] | export CAMPAIGN --format csv|json [--out FILE]\n"
      "  | plot CAMPAIGN --out front.svg\n"
      "  | report CAMPAIGN --task CONFIG... [--limit N --all --evaluator NAME=DEF --work-dir DIR\n"
      "      --out front.csv]",
      "the Pareto table (loss vs predicted TTFT, decode, memory, task scores); every trial, the\n"
      "front, the reference point and published shapes as a plot; report: the front's\n"
      "candidates trained by the campaign's evaluator and scored on tasks (configs/tasks/)",
      RunPareto);
  app->add_option("verb", o->verb, "show | export | plot | report")
      ->required()
      ->check(CLI::IsMember({"show", "export", "plot", "report"}));
  app->add_option("campaign", o->campaign, "the campaign")->required();
  app->add_option("--db", o->db, "the coordinator's SQLite file");
  app->add_flag("--all", o->all,
                "show: every trial of both stages, not only the evaluated ones; report: every "
                "evaluated trial, not only the front");
  app->add_option("--task", o->tasks, "report: task configs (textproto over a local JSONL)");
  app->add_option("--limit", o->limit, "report: score only the first N documents of each task")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--evaluator", o->evaluators,
                  "report: NAME=TEMPLATE or NAME=slurm:FILE, as the coordinator's flag, for a "
                  "campaign whose quality_evaluator is not in-process");
  app->add_option("--work-dir", o->work_dir,
                  "report: where candidates are pruned and trained (a Slurm evaluator uses its "
                  "shared_dir)");
  app->add_option("--format", o->format, "export: csv | json")
      ->check(CLI::IsMember({"csv", "json"}));
  app->add_option("--out", o->out,
                  "export: write here instead of stdout; plot: the SVG; report: also the CSV");
}

}  // namespace hilnas::tools
