// What a sliding-window layer costs inside the whole model against a full
// layer, on the device at hand (issue 35 item 2: at 2048 tokens and a
// window of 128 a window layer's attention must cost at most 0.15x a full
// layer's, on every CPU, a phone's included).
//
// bench/window_pricing.sh measures it on a build host, one process per
// variant; this is the same measurement in one process for a device with
// only the agent bundle: `hilnas agent --price-windows` (on a phone,
// `scripts/phone-agent SERIAL price-windows`). Four variants of one shape
// (all-full, mixed F W..W F, all-window, all-skip), each built once, then
// timed in rounds whose order rotates, every ratio taken within a round and
// the median over rounds reported with its range.
#ifndef HILNAS_DEVICE_AGENT_WINDOW_PRICING_H_
#define HILNAS_DEVICE_AGENT_WINDOW_PRICING_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "search_space/arch.h"

namespace hilnas {

struct WindowPricingOptions {
  int prompt_tokens = 2048;
  int decode_tokens = 64;
  int rounds = 3;
  int threads = 0;                   // intra-op threads; 0: the process's
  std::string weight_dtype = "f32";  // as Decoder::StoreWeightsAs names them
  std::string kv_dtype = "f16";      // as Decoder::SetKvDtype names them
  int64_t memory_limit_bytes = 0;    // 0: MemAvailable
  std::function<void(const std::string&)> progress;
};

// One variant's medians over the rounds.
struct WindowPricingRow {
  std::string variant;  // all-full, mixed, all-window, all-skip
  std::string pattern;  // e.g. "F W W F"
  double ttft_ms = 0;
  double decode_ms = 0;             // per token, at the prompt's depth
  double attention_prefill_ms = 0;  // the attention kernels' time in the prompt
  double attention_decode_ms = 0;   // the same per decode step
  double products_prefill_ms = 0;   // the weight products' time in the prompt
  double products_decode_ms = 0;    // the same per decode step
};

// A ratio's median over the rounds and its range.
struct PricingRatio {
  double median = 0, low = 0, high = 0;
  int rounds = 0;  // rounds that gave the ratio (0: none, e.g. nothing recorded)
  int of = 0;      // rounds run; more than `rounds` where some were left out
};

// A whole layer's share, (W - K) / (F - K), round by round from each
// variant's total (TTFT, or decode ms/token): all-window, all-skip and
// all-full. Differences of whole generations' times taken apart in time:
// a round whose F - K is under a quarter of its median over the rounds had
// its all-full and all-skip runs in different host states, and says
// nothing of a layer (on a 2-vCPU Zen 4 such rounds read 5408 and -0.20
// where the rest read 0.40-0.46). Those rounds are left out.
std::vector<double> WholeLayerRatios(const std::vector<double>& window,
                                     const std::vector<double>& skip,
                                     const std::vector<double>& full);

// min(numerators) / min(denominators) over the rounds whose terms were
// measured (> 0): each side's fastest round. A host that takes a vCPU away
// for a while only adds time, and adds more of it, relatively, to the
// shorter of two timings (a window layer's 4 ms against a full one's 28 on
// 2 threads), so a ratio's median over rounds drifts up on a busy host
// where the fastest rounds' ratio does not (as bench/thread_scaling.sh's
// third table). median = low = high = that ratio; rounds: the rounds kept
// on the fewer side (0: none).
PricingRatio FastestRoundsRatio(const std::vector<double>& numerators,
                                const std::vector<double>& denominators);

struct WindowPricing {
  std::vector<WindowPricingRow> rows;
  // Window layer / full layer, prefill and decode:
  PricingRatio attention_prefill, attention_decode;  // all-window's kernels / all-full's
  // The same from each variant's fastest round (FastestRoundsRatio).
  PricingRatio fastest_prefill, fastest_decode;
  // The same, each model's attention time over its own weight products'
  // time in the same generation: the products are the same work in both
  // models, so a host's drift between the two generations cancels (as
  // bench/window_pricing.sh's second form). No rounds where no product was
  // recorded.
  PricingRatio normalised_prefill, normalised_decode;
  PricingRatio mixed_prefill, mixed_decode;  // mixed's window layers / its full ones, per layer
  PricingRatio layer_prefill, layer_decode;  // (W - K) / (F - K) of TTFT and decode time:
                                             // whole layers, projections included
};

// `base` gives the shape (its attention pattern is replaced); its
// sliding_window must be positive and below the prompt, and it needs two
// layers or more. Threads are the process's (at::set_num_threads).
absl::StatusOr<WindowPricing> PriceWindowLayers(const Arch& base,
                                                const WindowPricingOptions& options);

// Markdown: the variants' medians, then the ratios.
std::string WindowPricingTable(const WindowPricing& pricing);

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_WINDOW_PRICING_H_
