// Robust statistics over latency samples: the summaries a BenchmarkResult
// derives from its raw samples (llama-bench keeps samples, derives averages).
#ifndef HILNAS_DEVICE_AGENT_SAMPLE_STATS_H_
#define HILNAS_DEVICE_AGENT_SAMPLE_STATS_H_

#include <vector>

#include "util/median.h"  // Median

namespace hilnas {

// REQUIRES for all: `x` non-empty.

// Median absolute deviation divided by the median: a spread that one
// outlier cannot move. 0 for a single sample.
double RelativeSpread(const std::vector<double>& x);

// Standard error of the median, 1.2533 * sd / sqrt(n) (the asymptotic
// efficiency of the median under normal noise). 0 for fewer than 2 samples.
// The latency model weighs each point by this (issue 4).
double MedianStandardError(const std::vector<double>& x);

// Spearman rank correlation of the samples with their order; +1 when every
// run is slower than the one before.
double TrendCorrelation(const std::vector<double>& x_in_time_order);

// Thermal throttling shows as later runs systematically slower than earlier
// ones: a strong positive trend (rank correlation >= 0.7) and a last-half
// median at least `min_slowdown` (relative) above the first half's. Needs at
// least 4 samples; fewer never count as throttled.
bool ThrottlingSuspected(const std::vector<double>& x_in_time_order, double min_slowdown = 0.05);

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_SAMPLE_STATS_H_
