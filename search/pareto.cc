#include "search/pareto.h"

#include <algorithm>
#include <cmath>

namespace hilnas {
namespace {

bool HasNan(const Objectives& p) {
  return std::any_of(p.begin(), p.end(), [](double v) { return std::isnan(v); });
}

// Points strictly inside the reference box, on their own front.
std::vector<Objectives> Relevant(const std::vector<Objectives>& points, const Objectives& ref) {
  std::vector<Objectives> inside;
  for (const Objectives& p : points) {
    if (p.size() != ref.size() || HasNan(p)) continue;
    bool below = true;
    for (size_t j = 0; j < p.size(); ++j) below = below && p[j] < ref[j];
    if (below) inside.push_back(p);
  }
  std::vector<Objectives> front;
  for (int i : NonDominated(inside)) front.push_back(inside[i]);
  return front;
}

// 2-objective sweep over a front: sorted by the first objective, the second
// falls, each point adds a rectangle up to the previous point's second value.
double Sweep2d(std::vector<Objectives> front, const Objectives& ref) {
  std::sort(front.begin(), front.end());
  double volume = 0, ceiling = ref[1];
  for (const Objectives& p : front) {
    if (p[1] >= ceiling) continue;
    volume += (ref[0] - p[0]) * (ceiling - p[1]);
    ceiling = p[1];
  }
  return volume;
}

double Slice(std::vector<Objectives> front, const Objectives& ref) {
  const size_t d = ref.size();
  if (front.empty()) return 0;
  if (d == 1) {
    double best = ref[0];
    for (const Objectives& p : front) best = std::min(best, p[0]);
    return ref[0] - best;
  }
  if (d == 2) return Sweep2d(std::move(front), ref);
  // Slabs between consecutive values of the last objective: inside a slab
  // the dominated region is that of the points below it, in d-1 objectives.
  std::sort(front.begin(), front.end(),
            [&](const Objectives& a, const Objectives& b) { return a[d - 1] < b[d - 1]; });
  const Objectives sub_ref(ref.begin(), ref.end() - 1);
  double volume = 0;
  std::vector<Objectives> below;
  for (size_t i = 0; i < front.size(); ++i) {
    below.emplace_back(front[i].begin(), front[i].end() - 1);
    const double top = i + 1 < front.size() ? front[i + 1][d - 1] : ref[d - 1];
    const double depth = top - front[i][d - 1];
    if (depth <= 0) continue;
    std::vector<Objectives> sub;
    for (int k : NonDominated(below)) sub.push_back(below[k]);
    below = sub;
    volume += depth * Slice(sub, sub_ref);
  }
  return volume;
}

}  // namespace

bool Dominates(const Objectives& a, const Objectives& b) {
  bool better = false;
  for (size_t j = 0; j < a.size(); ++j) {
    if (a[j] > b[j]) return false;
    if (a[j] < b[j]) better = true;
  }
  return better;
}

std::vector<int> NonDominated(const std::vector<Objectives>& points) {
  std::vector<int> out;
  for (size_t i = 0; i < points.size(); ++i) {
    if (HasNan(points[i])) continue;
    bool keep = true;
    for (size_t k = 0; k < points.size() && keep; ++k) {
      if (k == i || HasNan(points[k])) continue;
      if (Dominates(points[k], points[i]) || (k < i && points[k] == points[i])) keep = false;
    }
    if (keep) out.push_back(static_cast<int>(i));
  }
  return out;
}

double Hypervolume(const std::vector<Objectives>& points, const Objectives& ref) {
  if (ref.empty()) return 0;
  return Slice(Relevant(points, ref), ref);
}

}  // namespace hilnas
