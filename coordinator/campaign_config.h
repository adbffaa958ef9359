// Campaign configurations: the documented defaults, and the checks a
// configuration must pass before it is stored, each error naming the file
// and field. A campaign that would fail only after an hour of measuring
// (a space its backbone cannot be pruned to, a missing token file) is
// refused at `hilnas campaign create`.
#ifndef HILNAS_COORDINATOR_CAMPAIGN_CONFIG_H_
#define HILNAS_COORDINATOR_CAMPAIGN_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/campaign.pb.h"

namespace hilnas {

// Defaults for every field left 0 or empty:
//   batch_size 8 (paper's q), stage1_latency_points 64, stage1_sobol_points
//   half of that, stage1_target_r2 0.9, stage2_trials 64,
//   stage2_initial_points 2q, strategy "qnehvi", candidates 1000,
//   mc_samples 128, max_failed_fraction 0.25, ttft_prompt_tokens 1024,
//   backbone_metrics BACKBONE/metrics.json, quality_evaluator "in-process",
//   quality_timeout_s 3600, train {steps 20, batch 8, seq 128, lr 1e-3,
//   warm-up 2, 64 eval windows, 5% held out}, benchmark {1 warm-up, 3..5
//   repeats, 5% spread, 8 decode tokens, prefill chunk 1024}.
CampaignConfig WithCampaignDefaults(CampaignConfig config);

// Validates a configuration with defaults applied: the name, the space,
// that every member of the space can be pruned from the backbone (checked on
// the backbone's config.json and metrics, without loading weights), the
// evaluator's inputs, budgets and the reference point. `origin` names the
// file in messages.
absl::Status ValidateCampaignConfig(const CampaignConfig& config, const std::string& origin);

// Reads a .textproto, makes its relative paths absolute against the current
// directory, applies the defaults and validates.
absl::StatusOr<CampaignConfig> ReadCampaignConfig(const std::string& path);

// LOSS, TTFT, then the configured extra objectives, in the order of the
// reference point's coordinates.
std::vector<Objective> CampaignObjectives(const CampaignConfig& config);

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_CAMPAIGN_CONFIG_H_
