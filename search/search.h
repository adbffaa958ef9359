// The optimiser layer of the two-stage search (MobileLLM-Flash Sec. 3.4;
// STYLE 16): candidate architectures (feasible Sobol draws, mutations of
// the front, uniform random members), the objective models whose joint
// draws qNEHVI scores (a loss GP fitted here, the latency GPs of stage 1,
// exact memory), and the batch proposals of every strategy. The campaign
// runner and bench/search_bench both propose through ProposeBatch, so the
// benchmark measures the code a campaign runs.
#ifndef HILNAS_SEARCH_SEARCH_H_
#define HILNAS_SEARCH_SEARCH_H_

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "search/acquisition.h"
#include "search/strategy.h"
#include "latency_model/gp.h"
#include "latency_model/latency_model.h"
#include "proto/campaign.pb.h"
#include "search_space/space.h"

namespace hilnas {

// ArchKey of an Arch (see campaign_store.h): equal for equal architectures.
std::string KeyOf(const Arch& arch);

// The first `n` members of the seeded Sobol sequence whose keys are not in
// `seen`, in sequence order (so a resumed campaign draws the same points).
absl::StatusOr<std::vector<Arch>> FreshSobol(const Space& space, int n, uint64_t seed,
                                             const std::set<std::string>& seen);
// Up to `n` distinct uniform random members not in `seen`.
std::vector<Arch> RandomMembers(const Space& space, int n, std::mt19937_64& rng,
                                const std::set<std::string>& seen);
// One-step neighbours of each parent in the space, not in `seen`: depth +-1,
// each width +-1 choice, one layer's attention changed.
std::vector<Arch> Mutations(const Space& space, const std::vector<Arch>& parents,
                            const std::set<std::string>& seen);

// Weights (f32) plus the KV cache at `context_tokens`, in MB: the MEMORY
// objective, exact.
double MemoryMb(const Arch& arch, int context_tokens);

// Everything a proposal needs. Pointers are not owned.
struct SearchState {
  const Space* space = nullptr;
  std::vector<Objective> objectives = {LOSS, TTFT};  // the order of `reference`
  Objectives reference;
  int prompt_tokens = 0;
  const LatencyModel* ttft = nullptr;    // required for qNEHVI
  const LatencyModel* decode = nullptr;  // required when DECODE is an objective
  std::vector<Arch> observed;            // evaluated stage-2 trials
  std::vector<double> observed_loss;
  std::vector<Arch> pending;   // proposed, not yet evaluated
  std::set<std::string> seen;  // keys of every stage-2 trial
};

struct ProposeOptions {
  Strategy strategy = Strategy::kQnehvi;
  int q = 8;
  int candidates = 1000;  // Sobol draws; the front's mutations are added
  int mc_samples = 128;
  uint64_t seed = 0;   // Sobol sequence seed (fixed over a campaign)
  uint64_t round = 0;  // distinguishes rounds for random draws and MC
  // When non-empty, proposals come from these only (a tabular oracle).
  std::vector<Arch> pool;
  GpOptions gp;  // the loss GP's fit
};

struct Proposal {
  Arch arch;
  Provenance provenance = Provenance::kSobol;
  double acquisition = 0;  // log qNEHVI of the pick; 0 otherwise
};

// A batch of up to q distinct feasible architectures not yet seen. qNEHVI
// needs at least 2 observations and falls back to Sobol before that.
absl::StatusOr<std::vector<Proposal>> ProposeBatch(const SearchState& state,
                                                   const ProposeOptions& options);

// Stage 1's BO step (MobileLLM-Flash Sec. 3.4, "BO picks further points
// where the latency model is least sure"): among `candidates` fresh Sobol
// members, the q with the largest sd(log TTFT) x P(TTFT < reference), so the
// measurements go where the model is unsure *and* where the search will
// look. Picked one at a time; each pick joins the GP as a fantasy
// observation at its posterior mean (kriging believer), which shrinks the
// variance around it and spreads the batch.
absl::StatusOr<std::vector<Proposal>> ProposeLatencyBatch(const Space& space,
                                                          const LatencyModel& ttft,
                                                          double reference_ttft_ms, int q,
                                                          int candidates, uint64_t seed,
                                                          const std::set<std::string>& seen);

// Joint posterior draws of the objectives at `archs` (loss from a GP on
// `state`'s observations; TTFT/decode from the latency GPs, exponentiated;
// memory exact), draws x archs x objectives.
absl::StatusOr<JointSamples> SampleObjectives(const SearchState& state,
                                              const std::vector<Arch>& archs, int draws,
                                              uint64_t seed, const GpOptions& gp);

}  // namespace hilnas

#endif  // HILNAS_SEARCH_SEARCH_H_
