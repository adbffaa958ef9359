// Pareto fronts and hypervolume for the search's objectives (loss, TTFT,
// optionally decode time and memory), every objective minimised. The
// hypervolume is the Lebesgue measure of the region dominated by the points
// and bounded by the reference point (MobileLLM-Flash Sec. 3.4 uses loss 0.6
// and TTFT 4 s); it is what qNEHVI improves and what the search benchmark
// plots against trial count.
#ifndef HILNAS_SEARCH_PARETO_H_
#define HILNAS_SEARCH_PARETO_H_

#include <vector>

namespace hilnas {

using Objectives = std::vector<double>;  // one value per objective, lower is better

// True when a is no worse than b everywhere and better somewhere.
bool Dominates(const Objectives& a, const Objectives& b);

// Indices of the non-dominated points, ascending. Of exact duplicates only
// the first is kept. Points with a NaN are never on the front.
std::vector<int> NonDominated(const std::vector<Objectives>& points);

// Hypervolume dominated by `points` inside the box below `ref`. Points not
// strictly below ref in every objective contribute nothing. Exact: a sweep
// in 2 objectives (O(n log n)); slicing along the last objective in more
// (Hypervolume by Slicing Objectives, While et al. 2006), fine for the few
// hundred trials of a campaign in 3 or 4 objectives.
double Hypervolume(const std::vector<Objectives>& points, const Objectives& ref);

}  // namespace hilnas

#endif  // HILNAS_SEARCH_PARETO_H_
