// What a campaign found, in the forms people read: the Pareto front of its
// stage-2 trials and its hypervolume, a markdown table, CSV, JSON and an SVG
// plot. `hilnas pareto`, the campaign log and the web page all print
// through these, so they agree.
//
// A stage-2 trial's TTFT objective is the latency model's prediction, as in
// MobileLLM-Flash Sec. 3.4 (stage 2 trusts the GP); a measured TTFT, when
// the campaign confirms latency, is shown beside it.
#ifndef HILNAS_COORDINATOR_CAMPAIGN_REPORT_H_
#define HILNAS_COORDINATOR_CAMPAIGN_REPORT_H_

#include <string>
#include <utility>
#include <vector>

#include "coordinator/campaign_store.h"
#include "quality/trial_evaluator.h"
#include "search/pareto.h"

namespace hilnas {

// The trial's score on "TASK/METRIC", or on TASK's first metric for "TASK";
// nullptr when it has none.
const TaskScore* FindTaskScore(const Trial& trial, const std::string& task_metric);

// Puts an evaluator's scores into the trial: each replaces the trial's score
// of the same task and metric, or is added after the others.
void MergeTaskScores(const std::vector<TaskScoreValue>& scores, Trial& trial);

// The quality objective (LOSS) of a finished stage-2 trial: its held-out
// loss, or with config.quality_task the task's error, 1 - score (NaN when
// the trial has no such score).
double QualityObjective(const CampaignConfig& config, const Trial& trial);
// "loss", or "1 - piqa acc_norm".
std::string QualityObjectiveName(const CampaignConfig& config);

// The reference point's coordinates in the order of `objectives`; the
// quality bound is reference.loss, or reference.task_error with a
// quality_task.
Objectives ReferenceVector(const CampaignConfig& config, const ReferencePoint& reference,
                           const std::vector<Objective>& objectives);

// The objective values of a finished stage-2 trial.
Objectives TrialObjectives(const CampaignConfig& config, const Trial& trial,
                           const std::vector<Objective>& objectives);

struct FrontView {
  std::vector<const Trial*> evaluated;  // stage-2 DONE trials, in id order
  std::vector<bool> on_front;           // per evaluated trial
  double hypervolume = 0;               // against the record's reference point
  Objectives reference;
  std::vector<Objective> objectives;
};
FrontView ComputeFront(const CampaignRecord& record, const std::vector<Trial>& trials);

// "24 trials evaluated, 7 on the front, hypervolume 258 against loss 3.0,
// TTFT 442 ms".
std::string FrontSummary(const CampaignRecord& record, const std::vector<Trial>& trials);

// Where a stage-2 evaluation out stands: "4121 RUNNING on gpu03" (job,
// state as the evaluator last saw it, node when known); "(submitting)" for
// the job while its handle is not yet recorded.
std::string EvaluationSummary(const Trial& trial);

// One row per trial of either stage (`all`) or per evaluated stage-2 trial:
// id, stage, state, provenance, architecture, parameters, TTFT predicted and
// measured, decode, memory, loss, a column per task metric any trial has
// (CampaignConfig.tasks, `hilnas pareto report --task`), front.
// "latency at q4_0 weights, 1 thread(s), TTFT at 256 tokens; loss after
// q4_0": what a campaign's figures are for.
std::string DeploymentSummary(const CampaignConfig& config);
std::string ParetoTable(const CampaignRecord& record, const std::vector<Trial>& trials, bool all);
std::string ParetoCsv(const CampaignRecord& record, const std::vector<Trial>& trials);
std::string ParetoJson(const CampaignRecord& record, const std::vector<Trial>& trials);

// Loss against TTFT: every evaluated trial, the front as a staircase, the
// reference point, and `markers` (a published shape's name and its
// predicted TTFT, drawn as a labelled vertical line).
std::string ParetoSvg(const CampaignRecord& record, const std::vector<Trial>& trials,
                      const std::vector<std::pair<std::string, double>>& markers = {});

// "L6 d256 f512 FWFSFF" (+ "+KVP" / "+slim" when set).
std::string ArchSummary(const ArchSpec& arch);

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_CAMPAIGN_REPORT_H_
