// q-Noisy Expected Hypervolume Improvement over a discrete candidate set
// (Daulton et al. 2021, the acquisition MobileLLM-Flash Sec. 3.4 uses in
// stage 2; BoTorch's qNoisyExpectedHypervolumeImprovement). The acquisition
// layer of STYLE 16: it sees joint posterior draws, never a model.
//
// Noisy: the baseline front is not the observed values but, in each Monte
// Carlo draw, the front of the baseline points' *sampled* values, so noise
// in the observations is integrated over rather than trusted. Batches are
// built sequentially and greedily: each pick joins the baseline of every
// draw before the next is chosen, and pending points (proposed, not yet
// evaluated) are in the baseline from the start.
#ifndef HILNAS_SEARCH_ACQUISITION_H_
#define HILNAS_SEARCH_ACQUISITION_H_

#include <vector>

#include "absl/status/statusor.h"
#include "search/pareto.h"

namespace hilnas {

// Joint posterior draws of every objective at every point: value(s, i, k) is
// draw s of objective k at point i, lower is better.
class JointSamples {
 public:
  JointSamples(int samples, int points, int objectives)
      : s_(samples), n_(points), m_(objectives), v_(size_t(samples) * points * objectives) {}
  double& at(int s, int i, int k) { return v_[(size_t(s) * n_ + i) * m_ + k]; }
  double at(int s, int i, int k) const { return v_[(size_t(s) * n_ + i) * m_ + k]; }
  int samples() const { return s_; }
  int points() const { return n_; }
  int objectives() const { return m_; }

 private:
  int s_, n_, m_;
  std::vector<double> v_;
};

struct QNehviPick {
  int point = -1;  // index into the samples' points
  // log E[HVI] of this pick given the baseline and the earlier picks (the
  // qLogNEHVI form Ax defaults to); -inf when no draw improves.
  double log_value = 0;
};

// Chooses `q` distinct points among `candidates` (indices into `samples`),
// the baseline being points [0, num_baseline). When no candidate improves
// the hypervolume in any draw (all outside the reference box), the pick is
// the candidate closest to the box in the mean over draws, so a too-strict
// reference point still lets the search move. INVALID_ARGUMENT for
// mismatched sizes or q larger than the candidates.
//
// The log form changes no pick over a discrete set (log is monotone); it is
// reported because the values span many orders of magnitude.
absl::StatusOr<std::vector<QNehviPick>> SelectQNehvi(const JointSamples& samples, int num_baseline,
                                                     const std::vector<int>& candidates,
                                                     const Objectives& reference, int q);

// Hypervolume improvement of adding `p` to `front` (points inside the box
// below `ref`, mutually non-dominated). O(|front|) in 2 objectives.
double HypervolumeImprovement(const std::vector<Objectives>& front, const Objectives& p,
                              const Objectives& ref);

}  // namespace hilnas

#endif  // HILNAS_SEARCH_ACQUISITION_H_
