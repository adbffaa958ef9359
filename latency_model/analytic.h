// Analytic latency estimates beside the GP: a roofline from the device's
// measured compute peak and memory bandwidth. Prefill is compute-bound,
// decode reads every weight (and the KV cache) once per token. Used as a
// sanity check and as a proxy in `hilnas latency eval`.
#ifndef HILNAS_LATENCY_MODEL_ANALYTIC_H_
#define HILNAS_LATENCY_MODEL_ANALYTIC_H_

#include "search_space/arch.h"

namespace hilnas {

struct Roofline {
  double peak_flops = 0;     // FLOP/s, e.g. of an fp32 matmul
  double bandwidth = 0;      // bytes/s of streaming reads
  int bytes_per_weight = 4;  // fp32
};

// Measures this machine with `threads` threads: an n^3 fp32 matmul and a
// 1 GiB reduction, medians of 5.
Roofline MeasureRoofline(int threads);

// Bytes decoding reads per token: every weight once, except the input
// embedding of an untied model (one row).
double DecodeWeightBytes(const Arch& arch, int bytes_per_weight);

// max(compute time, memory time) in ms.
double RooflineTtftMs(const Arch& arch, int prompt_tokens, const Roofline& r);
double RooflineDecodeMs(const Arch& arch, int context_tokens, const Roofline& r);

}  // namespace hilnas

#endif  // HILNAS_LATENCY_MODEL_ANALYTIC_H_
