// How a stage-2 batch is chosen (Strategy) and where a proposal came from
// (Provenance), as enums; configs and SQLite keep the text form.
#ifndef HILNAS_SEARCH_STRATEGY_H_
#define HILNAS_SEARCH_STRATEGY_H_

#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace hilnas {

// qNEHVI (MobileLLM-Flash Sec. 3.4), or one of the baselines it is compared with.
enum class Strategy { kQnehvi, kSobol, kRandom };
absl::string_view StrategyName(Strategy strategy);  // "qnehvi", "sobol", "random"
// INVALID_ARGUMENT: "\"x\" is not one of qnehvi, sobol, random".
absl::StatusOr<Strategy> ParseStrategy(absl::string_view text);

// Stage 1: Sobol points, then points where the latency model is least sure.
// Stage 2: Sobol (initial points or the sobol strategy), random, qNEHVI over
// Sobol candidates, or qNEHVI over mutations of the current front.
enum class Provenance { kSobol, kUncertainty, kQnehvi, kQnehviMutation, kRandom };
// "sobol", "uncertainty", "qnehvi", "qnehvi/mutation", "random".
absl::string_view ProvenanceName(Provenance provenance);
absl::StatusOr<Provenance> ParseProvenance(absl::string_view text);

}  // namespace hilnas

#endif  // HILNAS_SEARCH_STRATEGY_H_
