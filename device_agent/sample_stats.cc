#include "device_agent/sample_stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace hilnas {
namespace {

// Average ranks (ties share the mean of their positions), 0-based.
std::vector<double> Ranks(const std::vector<double>& x) {
  std::vector<size_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return x[a] < x[b]; });
  std::vector<double> rank(x.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && x[order[j + 1]] == x[order[i]]) ++j;
    for (size_t k = i; k <= j; ++k) rank[order[k]] = 0.5 * (i + j);
    i = j + 1;
  }
  return rank;
}

}  // namespace

double RelativeSpread(const std::vector<double>& x) {
  if (x.size() < 2) return 0.0;
  const double m = Median(x);
  std::vector<double> dev;
  dev.reserve(x.size());
  for (double v : x) dev.push_back(std::abs(v - m));
  return m == 0.0 ? 0.0 : Median(dev) / std::abs(m);
}

double MedianStandardError(const std::vector<double>& x) {
  const size_t n = x.size();
  if (n < 2) return 0.0;
  const double mean = std::accumulate(x.begin(), x.end(), 0.0) / n;
  double ss = 0;
  for (double v : x) ss += (v - mean) * (v - mean);
  const double sd = std::sqrt(ss / (n - 1));
  return 1.2533 * sd / std::sqrt(static_cast<double>(n));
}

double TrendCorrelation(const std::vector<double>& x) {
  const size_t n = x.size();
  if (n < 2) return 0.0;
  const std::vector<double> r = Ranks(x);
  const double mean = 0.5 * (n - 1);
  double num = 0, den_r = 0, den_t = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (r[i] - mean) * (i - mean);
    den_r += (r[i] - mean) * (r[i] - mean);
    den_t += (i - mean) * (i - mean);
  }
  return den_r == 0.0 ? 0.0 : num / std::sqrt(den_r * den_t);
}

bool ThrottlingSuspected(const std::vector<double>& x, double min_slowdown) {
  if (x.size() < 4) return false;
  const size_t half = x.size() / 2;
  const double first = Median(std::vector<double>(x.begin(), x.begin() + half));
  const double last = Median(std::vector<double>(x.end() - half, x.end()));
  return TrendCorrelation(x) >= 0.7 && last >= first * (1.0 + min_slowdown);
}

}  // namespace hilnas
