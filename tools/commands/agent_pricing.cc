// `hilnas agent --price-windows`: what a sliding-window layer costs inside
// the whole model against a full one, on this device, in one process
// (device_agent/window_pricing.h). No coordinator. On a phone,
// `scripts/phone-agent SERIAL price-windows` runs this there.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "device_agent/environment.h"
#include "device_agent/window_pricing.h"
#include "tools/arch_file.h"
#include "tools/cli.h"
#include "tools/commands/agent.h"
#include "util/status_macros.h"

namespace hilnas::tools {
namespace {

absl::Status Price(const PricingFlags& f, int threads, int64_t memory_limit_bytes) {
  Arch arch = Full4Arch();  // with bench/window_pricing.sh's window
  arch.sliding_window = 128;
  if (!f.arch.empty()) {
    HILNAS_ASSIGN_OR_RETURN(arch, ReadArchFile(f.arch));
  }
  WindowPricingOptions o;
  o.prompt_tokens = f.prompt;
  o.rounds = f.rounds;
  o.decode_tokens = f.decode_tokens;
  o.threads = threads;
  o.weight_dtype = f.dtype;
  o.kv_dtype = f.kv_dtype;
  o.memory_limit_bytes = memory_limit_bytes;
  o.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  HILNAS_ASSIGN_OR_RETURN(WindowPricing p, PriceWindowLayers(arch, o));
  std::printf(
      "%s: prompt %d, window %d, %s weights, %s KV cache, %d thread%s, CPU %s, %d round%s\n\n%s",
      arch.name.c_str(), f.prompt, arch.sliding_window, f.dtype.c_str(), f.kv_dtype.c_str(),
      threads, threads == 1 ? "" : "s", ProbeDevice().soc().c_str(), f.rounds,
      f.rounds == 1 ? "" : "s", WindowPricingTable(p).c_str());
  return absl::OkStatus();
}

}  // namespace

void AddPricingFlags(CLI::App* app, PricingFlags* f) {
  app->add_flag("--price-windows", f->price_windows,
                "time what a sliding-window layer costs in the whole model against a full one "
                "on this device (all-full, mixed, all-window, all-skip variants in rounds), "
                "print the tables and exit (no coordinator)");
  app->add_option("--price-arch", f->arch,
                  "the shape to price (.textproto or config.json, its sliding_window set); "
                  "default: 4 x d 512 with a window of 128, bench/window_pricing.sh's");
  app->add_option("--price-prompt", f->prompt, "prompt tokens (above the window)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--price-rounds", f->rounds, "rounds of the four variants")
      ->check(CLI::Range(1, 100));
  app->add_option("--price-decode-tokens", f->decode_tokens, "tokens decoded after each prompt")
      ->check(CLI::Range(1, 4096));
  app->add_option("--price-dtype", f->dtype, "weights: f32 | f16 | bf16 | q4_0 | q8_0");
  app->add_option("--price-kv-dtype", f->kv_dtype, "K/V caches: f32 | f16 | q8_0");
}

int PriceWindowsHere(const PricingFlags& flags, int threads, int64_t memory_limit_bytes) {
  absl::Status s = Price(flags, threads, memory_limit_bytes);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace hilnas::tools
