// The median of a sample: the middle value, or the mean of the two middle
// values for an even count. One definition for the agents' summaries, the
// campaign's automatic reference point, PPD's paired timings and the benches.
#ifndef HILNAS_UTIL_MEDIAN_H_
#define HILNAS_UTIL_MEDIAN_H_

#include <algorithm>
#include <vector>

namespace hilnas {

// REQUIRES: `x` non-empty.
inline double Median(std::vector<double> x) {
  const size_t n = x.size();
  std::nth_element(x.begin(), x.begin() + n / 2, x.end());
  const double upper = x[n / 2];
  if (n % 2 == 1) return upper;
  return 0.5 * (upper + *std::max_element(x.begin(), x.begin() + n / 2));
}

}  // namespace hilnas

#endif  // HILNAS_UTIL_MEDIAN_H_
