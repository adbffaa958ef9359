// What CampaignRunner's files share (internal to coordinator/):
// campaign_runner.cc runs the loop and the steps, campaign_stage1.cc
// measures latency (MobileLLM-Flash Sec. 3.4, stage 1) and
// campaign_stage2.cc proposes, prunes and evaluates trials (stage 2).
#ifndef HILNAS_COORDINATOR_CAMPAIGN_RUNNER_INTERNAL_H_
#define HILNAS_COORDINATOR_CAMPAIGN_RUNNER_INTERNAL_H_

#include <memory>
#include <string>
#include <vector>

#include "coordinator/campaign_runner.h"
#include "latency_model/latency_model.h"
#include "pruner/backbone.h"
#include "search/search.h"

namespace hilnas {

// What a campaign's steps need beyond the store; rebuilt after a restart.
struct CampaignContext {
  std::unique_ptr<Space> space;
  std::unique_ptr<Backbone> backbone;          // loaded for stage 2
  std::unique_ptr<TrialEvaluator> evaluator;   // for stage 2
  std::unique_ptr<LatencyModel> ttft, decode;  // fitted on the measured trials
  size_t measured_at_fit = 0;                  // measured trials the models saw
};

namespace campaign_internal {

// The device class a campaign measures on: its pool, or "any".
std::string DeviceClass(const CampaignConfig& c);
// The median, or NaN for none.
double MedianOrNan(std::vector<double> v);
// A new trial of `stage` proposing `p`, with its exact counts.
Trial NewTrial(int stage, const Proposal& p, int prompt_tokens);
// The trial numbered `id`, which the caller knows is in `trials`.
Trial& FindTrial(std::vector<Trial>& trials, int64_t id);
// Whether a trial's latency was measured.
bool Measured(const Trial& t);

}  // namespace campaign_internal
}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_CAMPAIGN_RUNNER_INTERNAL_H_
