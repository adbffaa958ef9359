#include "search/acquisition.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace hilnas {
namespace {

bool InsideBox(const Objectives& p, const Objectives& ref) {
  for (size_t k = 0; k < ref.size(); ++k) {
    if (!(p[k] < ref[k])) return false;
  }
  return true;
}

// The non-dominated points of `points` inside the box, sorted by the first
// objective (so, in 2 objectives, by the second descending).
std::vector<Objectives> BoxFront(const std::vector<Objectives>& points, const Objectives& ref) {
  std::vector<Objectives> inside;
  for (const Objectives& p : points) {
    if (InsideBox(p, ref)) inside.push_back(p);
  }
  std::vector<Objectives> front;
  for (int i : NonDominated(inside)) front.push_back(inside[i]);
  std::sort(front.begin(), front.end());
  return front;
}

// How far outside the box a point is, in units of the reference.
double Outside(const Objectives& p, const Objectives& ref) {
  double d = 0;
  for (size_t k = 0; k < ref.size(); ++k) {
    d += std::max(0.0, (p[k] - ref[k]) / std::max(std::abs(ref[k]), 1e-12));
  }
  return d;
}

}  // namespace

double HypervolumeImprovement(const std::vector<Objectives>& front, const Objectives& p,
                              const Objectives& ref) {
  if (!InsideBox(p, ref)) return 0;
  if (ref.size() != 2) {
    std::vector<Objectives> with = front;
    with.push_back(p);
    return std::max(0.0, Hypervolume(with, ref) - Hypervolume(front, ref));
  }
  // Sweep x from p's x to the reference: the part of each column above p's y
  // and below the front's staircase (min y of front points left of x).
  const double a = p[0], b = p[1];
  size_t i = 0;
  double h = ref[1];
  while (i < front.size() && front[i][0] <= a) h = std::min(h, front[i++][1]);
  double x = a, hvi = 0;
  for (; i < front.size() && x < ref[0]; ++i) {
    const double next = std::min(front[i][0], ref[0]);
    hvi += (next - x) * std::max(0.0, h - b);
    x = next;
    h = std::min(h, front[i][1]);
  }
  if (x < ref[0]) hvi += (ref[0] - x) * std::max(0.0, h - b);
  return hvi;
}

absl::StatusOr<std::vector<QNehviPick>> SelectQNehvi(const JointSamples& samples, int num_baseline,
                                                     const std::vector<int>& candidates,
                                                     const Objectives& reference, int q) {
  const int S = samples.samples(), M = samples.objectives();
  if (M != static_cast<int>(reference.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("qNEHVI: ", M, " objectives but a ", reference.size(), "-D reference point"));
  }
  if (q < 1 || q > static_cast<int>(candidates.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("qNEHVI: batch of ", q, " from ", candidates.size(), " candidates"));
  }
  if (num_baseline < 0 || num_baseline > samples.points()) {
    return absl::InvalidArgumentError(absl::StrCat("qNEHVI: baseline of ", num_baseline));
  }
  for (int c : candidates) {
    if (c < 0 || c >= samples.points()) {
      return absl::InvalidArgumentError(absl::StrCat("qNEHVI: candidate index ", c));
    }
  }
  auto point = [&](int s, int i) {
    Objectives o(M);
    for (int k = 0; k < M; ++k) o[k] = samples.at(s, i, k);
    return o;
  };
  // Each draw's baseline points, then its front; picks are appended.
  std::vector<std::vector<Objectives>> baseline(S);
  for (int s = 0; s < S; ++s) {
    for (int i = 0; i < num_baseline; ++i) baseline[s].push_back(point(s, i));
  }
  std::vector<bool> taken(candidates.size(), false);
  std::vector<QNehviPick> picks;
  for (int round = 0; round < q; ++round) {
    std::vector<std::vector<Objectives>> fronts(S);
    for (int s = 0; s < S; ++s) fronts[s] = BoxFront(baseline[s], reference);
    int best = -1;
    double best_value = -1, best_outside = std::numeric_limits<double>::infinity();
    int closest = -1;
    for (size_t c = 0; c < candidates.size(); ++c) {
      if (taken[c]) continue;
      double sum = 0, outside = 0;
      for (int s = 0; s < S; ++s) {
        const Objectives p = point(s, candidates[c]);
        sum += HypervolumeImprovement(fronts[s], p, reference);
        outside += Outside(p, reference);
      }
      const double value = sum / S;
      if (value > best_value) best_value = value, best = static_cast<int>(c);
      if (outside < best_outside) best_outside = outside, closest = static_cast<int>(c);
    }
    if (best_value <= 0) best = closest;
    taken[best] = true;
    picks.push_back({candidates[best], best_value > 0 ? std::log(best_value)
                                                      : -std::numeric_limits<double>::infinity()});
    for (int s = 0; s < S; ++s) baseline[s].push_back(point(s, candidates[best]));
  }
  return picks;
}

}  // namespace hilnas
