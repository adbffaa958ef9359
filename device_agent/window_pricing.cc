#include "device_agent/window_pricing.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "device_agent/environment.h"
#include "device_agent/protocol.h"
#include "model/decoder.h"
#include "model/generate.h"
#include "model/op_times.h"
#include "model/runtime_tuning.h"
#include "search_space/counts.h"
#include "util/median.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

using Clock = std::chrono::steady_clock;

// model/attention.h's records: full layers' kernels and window layers'.
constexpr char kFullRecord[] = "hilnas::attention";
constexpr char kWindowRecord[] = "hilnas::attention_window";
// The weight products' records (model/decoder_layers.cc, model/gemv.h,
// model/quant.h): the same work in every variant with attention layers.
constexpr const char* kProductRecords[] = {"hilnas::prompt_mm", "hilnas::gemv",
                                           "hilnas::quant_matmul"};
constexpr int64_t kPrefillChunk = 1024;  // as the agents' runtime prefills

struct Variant {
  std::string name;
  Arch arch;
  int full_layers = 0, window_layers = 0;
  std::optional<Decoder> decoder;
};

// One variant once: wall times of a generation without hooks, then the
// attention kernels' times in a second one with them.
struct Figures {
  double ttft_ms = 0, decode_ms = 0;
  double full_prefill_ms = 0, window_prefill_ms = 0, full_decode_ms = 0, window_decode_ms = 0;
  double products_prefill_ms = 0, products_decode_ms = 0;  // weight products, same generation
};

double ProductsMs(const OpTimer& timer) {
  double seconds = 0;
  for (const char* name : kProductRecords) seconds += timer.Seconds(name);
  return 1e3 * seconds;
}

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

torch::Tensor Prefill(Decoder& d, const torch::Tensor& tokens, KvCache& cache) {
  torch::Tensor logits;
  const int64_t n = tokens.size(1);
  for (int64_t s = 0; s < n; s += kPrefillChunk) {
    logits = d.ForwardCached(tokens.narrow(1, s, std::min(kPrefillChunk, n - s)), cache,
                             /*last_only=*/true);
  }
  return logits;
}

// Greedy decode steps after `logits`; returns the last step's logits.
torch::Tensor Decode(Decoder& d, torch::Tensor logits, KvCache& cache, int steps) {
  for (int i = 0; i < steps; ++i) {
    int64_t next;
    {
      at::RecordFunctionGuard unhooked(false);  // the token choice is no kernel's time
      next = GreedyPick(logits);
    }
    logits = d.ForwardToken(next, cache);
  }
  return logits;
}

Figures Measure(Decoder& d, const torch::Tensor& tokens, int decode_tokens) {
  const int64_t capacity = tokens.size(1) + decode_tokens;
  Figures f;
  {
    KvCache cache = d.NewCache(1, capacity);
    Clock::time_point t0 = Clock::now();
    torch::Tensor logits = Prefill(d, tokens, cache);
    f.ttft_ms = MsSince(t0);
    t0 = Clock::now();
    Decode(d, logits, cache, decode_tokens);
    f.decode_ms = MsSince(t0) / decode_tokens;
  }
  KvCache cache = d.NewCache(1, capacity);
  OpTimer timer;
  torch::Tensor logits = Prefill(d, tokens, cache);
  f.full_prefill_ms = 1e3 * timer.Seconds(kFullRecord);
  f.window_prefill_ms = 1e3 * timer.Seconds(kWindowRecord);
  f.products_prefill_ms = ProductsMs(timer);
  timer.Clear();
  Decode(d, logits, cache, decode_tokens);
  f.full_decode_ms = 1e3 * timer.Seconds(kFullRecord) / decode_tokens;
  f.window_decode_ms = 1e3 * timer.Seconds(kWindowRecord) / decode_tokens;
  f.products_decode_ms = ProductsMs(timer) / decode_tokens;
  return f;
}

PricingRatio Summarise(const std::vector<double>& per_round) {
  if (per_round.empty()) return {};
  return {Median(per_round), *std::min_element(per_round.begin(), per_round.end()),
          *std::max_element(per_round.begin(), per_round.end()),
          static_cast<int>(per_round.size())};
}

// a / b over c / d where every term was measured (> 0), else nothing.
void PushQuotient(double a, double b, double c, double d, std::vector<double>& to) {
  if (a > 0 && b > 0 && c > 0 && d > 0) to.push_back((a / b) / (c / d));
}

// Weights and caches of every variant at once, every element as wide as
// the wider of the weights' and the cache's (2 bytes for the 8- and 4-bit
// blocks: an estimate from above).
absl::Status CheckFits(const std::vector<Variant>& variants, const WindowPricingOptions& o) {
  const int bytes = o.weight_dtype == "f32" || o.kv_dtype == "f32" ? 4 : 2;
  int64_t need = 0;
  for (const Variant& v : variants) {
    need += EstimateRunBytes(v.arch, o.prompt_tokens + o.decode_tokens, bytes);
  }
  const int64_t limit = o.memory_limit_bytes > 0 ? o.memory_limit_bytes : MemAvailableBytes();
  if (limit > 0 && need > limit) {
    return absl::ResourceExhaustedError(
        absl::StrCat("window pricing holds four models of this shape: ", need / (1 << 20),
                     " MiB at ", o.prompt_tokens + o.decode_tokens, " tokens; this device allows ",
                     limit / (1 << 20), " MiB"));
  }
  return absl::OkStatus();
}

absl::StatusOr<WindowPricing> Price(const Arch& base, const WindowPricingOptions& o) {
  if (o.prompt_tokens < 1 || o.decode_tokens < 1 || o.rounds < 1 || o.threads < 0 ||
      o.prompt_tokens + int64_t{o.decode_tokens} > kMaxContext) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window pricing needs a prompt, decode tokens and rounds of 1 or more, within ",
        kMaxContext, " tokens, and threads >= 0 (got ", o.prompt_tokens, ", ", o.decode_tokens,
        ", ", o.rounds, ", ", o.threads, ")"));
  }
  if (base.sliding_window < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        base.name, ": sliding_window is ", base.sliding_window, "; window layers need a window"));
  }
  if (o.prompt_tokens <= base.sliding_window) {
    return absl::InvalidArgumentError(
        absl::StrCat("a prompt of ", o.prompt_tokens, " tokens fits the window of ",
                     base.sliding_window, ": a window layer would cost what a full one does"));
  }
  if (base.num_layers < 3) {
    return absl::InvalidArgumentError(absl::StrCat(base.name, ": ", base.num_layers,
                                                   " layers; mixed (F W..W F) needs 3 or more"));
  }
  const int n = base.num_layers;
  std::vector<Variant> variants;
  for (const char* name : {"all-full", "mixed", "all-window", "all-skip"}) {
    Variant v;
    v.name = name;
    v.arch = base;
    v.arch.attention.resize(n);
    const std::string kind = name;
    for (int l = 0; l < n; ++l) {
      const bool edge = l == 0 || l == n - 1;
      v.arch.attention[l] = kind == "all-full"     ? Attention::kFull
                            : kind == "all-skip"   ? Attention::kSkip
                            : kind == "all-window" ? Attention::kSlidingWindow
                            : edge                 ? Attention::kFull
                                                   : Attention::kSlidingWindow;
      v.full_layers += v.arch.attention[l] == Attention::kFull;
      v.window_layers += v.arch.attention[l] == Attention::kSlidingWindow;
    }
    v.arch.name = absl::StrCat(base.name, "-", name);
    HILNAS_RETURN_IF_ERROR(ValidateArch(v.arch));
    variants.push_back(std::move(v));
  }
  HILNAS_RETURN_IF_ERROR(CheckFits(variants, o));

  if (o.threads > 0) at::set_num_threads(o.threads);
  torch::NoGradGuard no_grad;
  torch::manual_seed(1);
  const torch::Tensor tokens =
      torch::randint(0, base.vocab_size, {1, o.prompt_tokens}, torch::kLong);
  for (Variant& v : variants) {
    HILNAS_ASSIGN_OR_RETURN(Decoder d,
                            Decoder::Create(v.arch, /*seed=*/1, torch::kFloat, o.weight_dtype));
    HILNAS_RETURN_IF_ERROR(d.SetKvDtype(o.kv_dtype));
    v.decoder.emplace(std::move(d));
  }
  // The kernels as the agents tune them (model/runtime_tuning.h), on the
  // all-full model (every variant's products are among its matrices).
  HILNAS_RETURN_IF_ERROR(TuneRuntime(*variants[0].decoder, std::nullopt, o.progress).status());
  // Warm-ups as the agents time (device_agent/protocol.h): until a prompt
  // runs on memory already mapped.
  for (Variant& v : variants) {
    for (int w = 1;; ++w) {
      KvCache cache = v.decoder->NewCache(1, o.prompt_tokens + o.decode_tokens);
      const int64_t before = MinorPageFaults();
      Decode(*v.decoder, Prefill(*v.decoder, tokens, cache), cache, std::min(o.decode_tokens, 4));
      if (!OneMoreWarmUp(w, 1, MinorPageFaults() - before, cache.bytes())) break;
    }
  }

  // figures[round][variant]
  std::vector<std::vector<Figures>> figures(o.rounds, std::vector<Figures>(variants.size()));
  for (int r = 0; r < o.rounds; ++r) {
    for (size_t i = 0; i < variants.size(); ++i) {
      const size_t k = (i + r) % variants.size();  // an order that rotates
      figures[r][k] = Measure(*variants[k].decoder, tokens, o.decode_tokens);
    }
    if (o.progress) {
      std::vector<std::string> parts;
      for (size_t k = 0; k < variants.size(); ++k) {
        parts.push_back(absl::StrFormat("%s %.1f ms, %.3f ms/token", variants[k].name,
                                        figures[r][k].ttft_ms, figures[r][k].decode_ms));
      }
      o.progress(absl::StrCat("round ", r + 1, "/", o.rounds, ": ", absl::StrJoin(parts, "; ")));
    }
  }

  WindowPricing out;
  for (size_t k = 0; k < variants.size(); ++k) {
    std::vector<double> t, d, ap, ad, pp, pd;
    for (int r = 0; r < o.rounds; ++r) {
      const Figures& f = figures[r][k];
      t.push_back(f.ttft_ms);
      d.push_back(f.decode_ms);
      ap.push_back(f.full_prefill_ms + f.window_prefill_ms);
      ad.push_back(f.full_decode_ms + f.window_decode_ms);
      pp.push_back(f.products_prefill_ms);
      pd.push_back(f.products_decode_ms);
    }
    std::vector<std::string> letters;
    for (Attention a : variants[k].arch.attention) {
      letters.push_back(a == Attention::kFull ? "F" : a == Attention::kSkip ? "K" : "W");
    }
    out.rows.push_back({variants[k].name, absl::StrJoin(letters, " "), Median(t), Median(d),
                        Median(ap), Median(ad), Median(pp), Median(pd)});
  }
  enum { kAllFull, kMixed, kAllWindow, kAllSkip };
  const double mixed_layers =
      static_cast<double>(variants[kMixed].full_layers) / variants[kMixed].window_layers;
  std::vector<double> ap, ad, np, nd, mp, md, lp, ld;
  std::vector<double> wp, wd, fp, fd;  // all-window's and all-full's kernels, round by round
  for (const std::vector<Figures>& f : figures) {
    const Figures &w = f[kAllWindow], &full = f[kAllFull];
    ap.push_back(w.window_prefill_ms / full.full_prefill_ms);
    ad.push_back(w.window_decode_ms / full.full_decode_ms);
    wp.push_back(w.window_prefill_ms);
    wd.push_back(w.window_decode_ms);
    fp.push_back(full.full_prefill_ms);
    fd.push_back(full.full_decode_ms);
    PushQuotient(w.window_prefill_ms, w.products_prefill_ms, full.full_prefill_ms,
                 full.products_prefill_ms, np);
    PushQuotient(w.window_decode_ms, w.products_decode_ms, full.full_decode_ms,
                 full.products_decode_ms, nd);
    mp.push_back(mixed_layers * f[kMixed].window_prefill_ms / f[kMixed].full_prefill_ms);
    md.push_back(mixed_layers * f[kMixed].window_decode_ms / f[kMixed].full_decode_ms);
  }
  for (const bool prefill : {true, false}) {
    std::vector<double> w, k, full;
    for (const std::vector<Figures>& f : figures) {
      w.push_back(prefill ? f[kAllWindow].ttft_ms : f[kAllWindow].decode_ms);
      k.push_back(prefill ? f[kAllSkip].ttft_ms : f[kAllSkip].decode_ms);
      full.push_back(prefill ? f[kAllFull].ttft_ms : f[kAllFull].decode_ms);
    }
    (prefill ? lp : ld) = WholeLayerRatios(w, k, full);
  }
  out.fastest_prefill = FastestRoundsRatio(wp, fp);
  out.fastest_decode = FastestRoundsRatio(wd, fd);
  out.attention_prefill = Summarise(ap);
  out.attention_decode = Summarise(ad);
  out.normalised_prefill = Summarise(np);
  out.normalised_decode = Summarise(nd);
  out.mixed_prefill = Summarise(mp);
  out.mixed_decode = Summarise(md);
  out.layer_prefill = Summarise(lp);
  out.layer_decode = Summarise(ld);
  for (PricingRatio* r :
       {&out.attention_prefill, &out.attention_decode, &out.fastest_prefill, &out.fastest_decode,
        &out.normalised_prefill, &out.normalised_decode, &out.mixed_prefill, &out.mixed_decode,
        &out.layer_prefill, &out.layer_decode}) {
    r->of = o.rounds;
  }
  return out;
}

// A ratio's median and its range over the rounds (`range` false: the
// median alone, as a FastestRoundsRatio has no range), and the rounds it
// drew on where some were left out.
std::string Cell(const PricingRatio& r, bool range = true) {
  if (r.rounds == 0) return "n/a";  // no round recorded all of the ratio's terms
  std::string cell = range ? absl::StrFormat("%.3f (%.3f-%.3f)", r.median, r.low, r.high)
                           : absl::StrFormat("%.3f", r.median);
  if (r.of > r.rounds) absl::StrAppend(&cell, ", ", r.rounds, " of ", r.of, " rounds");
  return cell;
}

}  // namespace

PricingRatio FastestRoundsRatio(const std::vector<double>& numerators,
                                const std::vector<double>& denominators) {
  auto measured = [](const std::vector<double>& v) {
    std::vector<double> kept;
    std::copy_if(v.begin(), v.end(), std::back_inserter(kept), [](double x) { return x > 0; });
    return kept;
  };
  const std::vector<double> n = measured(numerators), d = measured(denominators);
  if (n.empty() || d.empty()) return {};
  const double ratio =
      *std::min_element(n.begin(), n.end()) / *std::min_element(d.begin(), d.end());
  return {ratio, ratio, ratio, static_cast<int>(std::min(n.size(), d.size()))};
}

std::vector<double> WholeLayerRatios(const std::vector<double>& window,
                                     const std::vector<double>& skip,
                                     const std::vector<double>& full) {
  const size_t n = std::min({window.size(), skip.size(), full.size()});
  std::vector<double> span;  // F - K, round by round
  for (size_t r = 0; r < n; ++r) span.push_back(full[r] - skip[r]);
  std::vector<double> out;
  if (n == 0) return out;
  const double floor = 0.25 * Median(span);
  for (size_t r = 0; r < n; ++r) {
    if (span[r] > 0 && span[r] >= floor) out.push_back((window[r] - skip[r]) / span[r]);
  }
  return out;
}

absl::StatusOr<WindowPricing> PriceWindowLayers(const Arch& base,
                                                const WindowPricingOptions& options) {
  try {
    return Price(base, options);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("window pricing: ", e.what()));
  }
}

std::string WindowPricingTable(const WindowPricing& p) {
  std::string out =
      "| variant | layers | TTFT ms | decode ms/token | attention ms, prefill | attention "
      "ms/step, decode | weight products ms, prefill | weight products ms/step, decode "
      "|\n|---|---|---:|---:|---:|---:|---:|---:|\n";
  for (const WindowPricingRow& r : p.rows) {
    absl::StrAppendFormat(&out, "| %s | %s | %.1f | %.3f | %.2f | %.4f | %.2f | %.4f |\n",
                          r.variant, r.pattern, r.ttft_ms, r.decode_ms, r.attention_prefill_ms,
                          r.attention_decode_ms, r.products_prefill_ms, r.products_decode_ms);
  }
  absl::StrAppend(
      &out, "\n| window layer / full layer: median of the rounds (range) | prefill | decode |\n",
      "|---|---:|---:|\n");
  absl::StrAppend(&out, "| attention kernels in the model (all-window / all-full) | ",
                  Cell(p.attention_prefill), " | ", Cell(p.attention_decode), " |\n");
  absl::StrAppend(&out,
                  "| the same from each variant's fastest round (min all-window / min all-full) | ",
                  Cell(p.fastest_prefill, /*range=*/false), " | ",
                  Cell(p.fastest_decode, /*range=*/false), " |\n");
  absl::StrAppend(&out, "| the same, each model's attention over its own weight products' time | ",
                  Cell(p.normalised_prefill), " | ", Cell(p.normalised_decode), " |\n");
  absl::StrAppend(&out, "| attention kernels, mixed (a window layer / a full one, one model) | ",
                  Cell(p.mixed_prefill), " | ", Cell(p.mixed_decode), " |\n");
  absl::StrAppend(&out, "| whole layer, projections included ((W - K) / (F - K)) | ",
                  Cell(p.layer_prefill), " | ", Cell(p.layer_decode), " |\n");
  return out;
}

}  // namespace hilnas
