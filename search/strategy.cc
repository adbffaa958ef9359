#include "search/strategy.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace hilnas {
namespace {

constexpr std::array<absl::string_view, 3> kStrategies = {"qnehvi", "sobol", "random"};
constexpr std::array<absl::string_view, 5> kProvenances = {"sobol", "uncertainty", "qnehvi",
                                                          "qnehvi/mutation", "random"};

}  // namespace

absl::string_view StrategyName(Strategy s) { return kStrategies[static_cast<int>(s)]; }

absl::StatusOr<Strategy> ParseStrategy(absl::string_view text) {
  for (size_t i = 0; i < kStrategies.size(); ++i) {
    if (kStrategies[i] == text) return static_cast<Strategy>(i);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("\"", text, "\" is not one of ", absl::StrJoin(kStrategies, ", ")));
}

absl::string_view ProvenanceName(Provenance p) { return kProvenances[static_cast<int>(p)]; }

absl::StatusOr<Provenance> ParseProvenance(absl::string_view text) {
  for (size_t i = 0; i < kProvenances.size(); ++i) {
    if (kProvenances[i] == text) return static_cast<Provenance>(i);
  }
  return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" is not a provenance (one of ",
                                                 absl::StrJoin(kProvenances, ", "), ")"));
}

}  // namespace hilnas
