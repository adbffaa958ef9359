// Scrambled Sobol sampling of a Space, on libtorch's Sobol engine (the one
// behind torch.quasirandom.SobolEngine). Stage 1 of the two-stage search
// starts from these points (MobileLLM-Flash Sec. 3.4).
#ifndef HILNAS_SEARCH_SPACE_SOBOL_H_
#define HILNAS_SEARCH_SPACE_SOBOL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "search_space/space.h"

namespace hilnas {

struct SobolSample {
  std::vector<Arch> archs;                  // distinct members of the space
  std::vector<std::vector<double>> points;  // their encodings (bin centres)
  int64_t drawn = 0;  // Sobol points drawn; archs.size() / drawn is the acceptance rate
};

// Draws Sobol points in [0,1]^D, decodes each and keeps the distinct ones
// that satisfy the space's constraint (rejection keeps the accepted points
// evenly spread over the feasible set), until `n` are found. Deterministic
// for a seed. RESOURCE_EXHAUSTED when `max_draws` points give fewer than n
// (a space smaller than n, or a constraint almost nothing satisfies).
absl::StatusOr<SobolSample> SampleSobol(const Space& space, int n, uint64_t seed,
                                        int64_t max_draws = 1 << 20);

// Raw scrambled Sobol points, n x dimension, for callers that decode
// themselves (the acquisition optimiser). Deterministic for a seed.
absl::StatusOr<std::vector<std::vector<double>>> SobolPoints(int dimension, int64_t n,
                                                             uint64_t seed);

}  // namespace hilnas

#endif  // HILNAS_SEARCH_SPACE_SOBOL_H_
