// `hilnas space show | sample`: the search space's dimensions and size;
// Sobol draws of feasible architectures.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "search_space/counts.h"
#include "search_space/sobol.h"
#include "search_space/space.h"
#include "tools/commands/commands.h"
#include "tools/common.h"

namespace hilnas::tools {
namespace {

struct SpaceOptions {
  std::string verb;   // show | sample
  std::string space;  // default: MobileLLM-Flash Tab. 3
  int32_t n = 8;
  uint64_t seed = 0;
};

int RunSpace(const SpaceOptions& cl) {
  auto space = SpaceOf(cl.space);
  if (!space.ok()) return Fail(space.status());
  if (cl.verb == "show") {
    std::printf("dimensions (D = %d): %s\n", space->dimensions(),
                absl::StrJoin(space->dimension_names(), ", ").c_str());
    std::printf("num_layers: %s\nd_ffn: %s\nd_model: %s\n",
                absl::StrJoin(space->layer_choices(), " ").c_str(),
                absl::StrJoin(space->ffn_choices(), " ").c_str(),
                absl::StrJoin(space->model_choices(), " ").c_str());
    std::printf("block size %d; at most %d consecutive efficient-attention layers (Sec. 3.5)\n",
                space->block_size(), space->max_consecutive_efficient());
    std::printf("architectures: %s (without the constraint: %s)\n",
                WithCommas(static_cast<int64_t>(space->Size())).c_str(),
                WithCommas(static_cast<int64_t>(space->Size(false))).c_str());
    return 0;
  }
  if (cl.verb == "sample") {
    auto sample = SampleSobol(*space, cl.n, cl.seed);
    if (!sample.ok()) return Fail(sample.status());
    std::printf("%d feasible of %lld Sobol draws\n", static_cast<int>(sample->archs.size()),
                static_cast<long long>(sample->drawn));
    std::printf("%6s %7s %6s %-18s %15s %12s\n", "layers", "d_model", "d_ffn", "pattern",
                "parameters", "prefill@2k");
    for (const Arch& a : sample->archs) {
      std::printf("%6d %7d %6d %-18s %15s %12.4g\n", a.num_layers, a.d_model, a.d_ffn,
                  PatternString(a.attention).c_str(),
                  WithCommas(CountParameters(a).model()).c_str(), PrefillFlops(a, 2048));
    }
    return 0;
  }
  return Fail(absl::InvalidArgumentError("usage: hilnas space show|sample [--space FILE]"));
}

}  // namespace

void AddSpaceCommand(Cli& cli) {
  auto [app, o] = cli.Add<SpaceOptions>(
      "space", "show [--space FILE] | sample [--n N --seed S]",
      "search-space dimensions and size; Sobol draws of feasible architectures", RunSpace);
  app->add_option("verb", o->verb, "show | sample")
      ->required()
      ->check(CLI::IsMember({"show", "sample"}));
  app->add_option("--space", o->space,
                  "SearchSpace .textproto file; default: MobileLLM-Flash Tab. 3")
      ->check(CLI::ExistingFile);
  app->add_option("--n", o->n, "sample: how many feasible draws")->check(CLI::Range(1, 1'000'000));
  app->add_option("--seed", o->seed, "sample: Sobol scrambling seed");
}

}  // namespace hilnas::tools
