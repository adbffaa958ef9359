// Where a prefill and a decode step of the built-in runtime spend their time
// (issue 22, item 2): self time per operation, from libtorch's
// RecordFunction hooks, which see every ATen op and hilnas's own kernels
// (hilnas::gemv, hilnas::attention and hilnas::attention_window for window
// layers, hilnas::rms_norm, hilnas::rope).
// "(between ops)" is wall time no op accounts for: hilnas's C++ between
// calls, view bookkeeping, the hooks themselves.
//
// usage: step_profile (--arch FILE.textproto | --shape NAME) [--prompt 256,2048]
//                     [--threads 1] [--weight-dtype f32|f16|bf16|q4_0|q8_0] [--kv-dtype
//                     f32|f16|q8_0]
//                     [--decode-tokens 64] [--repeats 3] [--chunk 1024] [--aten-decode 1]
//
// --aten-decode 1 decodes through the ATen modules (Decoder::
// SetInPlaceDecode(false)) instead of the allocation-free step.
//
// The hooks cost about a microsecond per op, so shares are what to read;
// absolute times come from `hilnas run`.
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "device_agent/environment.h"
#include "device_agent/protocol.h"
#include "model/blas_core.h"
#include "model/decoder.h"
#include "model/generate.h"
#include "model/op_times.h"
#include "model/runtime_tuning.h"
#include "proto/arch.pb.h"
#include "search_space/arch.h"
#include "search_space/shapes.h"
#include "util/subprocess.h"
#include "util/textproto.h"

namespace step_profile_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "step_profile: %s\n", message.c_str());
  std::exit(1);
}

std::string Arg(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (!std::strcmp(argv[i], name)) return argv[i + 1];
  }
  return fallback;
}

int64_t IntArg(int argc, char** argv, const char* name, const char* fallback) {
  int64_t v = 0;
  const std::string s = Arg(argc, argv, name, fallback);
  if (!absl::SimpleAtoi(s, &v) || v <= 0)
    Die(std::string(name) + " " + s + ": not a positive integer");
  return v;
}

hilnas::Arch LoadArch(int argc, char** argv) {
  const std::string file = Arg(argc, argv, "--arch", "");
  if (!file.empty()) {
    hilnas::ArchSpec spec;
    absl::Status read = hilnas::ReadTextProtoFile(file, &spec);
    if (!read.ok()) Die(std::string(read.message()));
    auto arch = hilnas::ArchFromProto(spec);
    if (!arch.ok()) Die(file + ": " + std::string(arch.status().message()));
    return *arch;
  }
  auto shape = hilnas::FindShape(Arg(argc, argv, "--shape", "mobilellm-flash-350m"));
  if (!shape.ok()) Die(std::string(shape.status().message()));
  return shape->arch;
}

// Prints the table for one phase: self time per op per step, largest first.
void Report(const char* phase, double wall_s, int64_t steps, const hilnas::OpTimer& timer) {
  std::vector<std::pair<std::string, hilnas::OpTime>> rows(timer.ops().begin(), timer.ops().end());
  double accounted = 0;
  for (const auto& r : rows) accounted += r.second.seconds;
  rows.push_back({"(between ops)", {wall_s - accounted, 0}});
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  std::printf("\n%s: %.3f ms per step (with hooks)\n\n", phase, 1e3 * wall_s / steps);
  std::printf("| op | calls/step | ms/step | share |\n|---|---:|---:|---:|\n");
  for (const auto& [name, v] : rows) {
    // Small ATen ops are left out; hilnas's own kernels never (scripts read
    // their rows: bench/window_pricing.sh, whose window layers' decode
    // attention can be under 0.5% of a step).
    if (v.seconds / wall_s < 0.005 && !absl::StartsWith(name, "hilnas::")) continue;
    std::printf("| %s | %.0f | %.3f | %.1f%% |\n", name.c_str(),
                static_cast<double>(v.calls) / steps, 1e3 * v.seconds / steps,
                100 * v.seconds / wall_s);
  }
}

// --prompt: comma-separated positive lengths.
std::vector<int64_t> ParsePrompts(const std::string& text) {
  std::vector<int64_t> prompts;
  for (absl::string_view p : absl::StrSplit(text, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(p, &v) || v <= 0) Die("--prompt: bad length " + std::string(p));
    prompts.push_back(v);
  }
  return prompts;
}

// Random weights stored in `dtype` (f32, f16, bf16, q4_0 or q8_0), a KV
// cache of `kv_dtype` (f32, f16 or q8_0); decode through the ATen modules
// when `aten_decode`.
hilnas::Decoder BuildDecoder(const hilnas::Arch& arch, const std::string& dtype,
                             const std::string& kv_dtype, bool aten_decode) {
  auto decoder = hilnas::Decoder::Create(arch, 1);
  if (!decoder.ok()) Die(std::string(decoder.status().message()));
  absl::Status stored = decoder->StoreWeightsAs(dtype);
  if (!stored.ok()) Die(std::string(stored.message()));
  absl::Status kv = decoder->SetKvDtype(kv_dtype);
  if (!kv.ok()) Die(std::string(kv.message()));
  if (aten_decode) decoder->SetInPlaceDecode(false);
  return *std::move(decoder);
}

}  // namespace

int Main(int argc, char** argv) {
  const int64_t threads = IntArg(argc, argv, "--threads", "1");
  // As agents time, with OpenBLAS's kernels from this CPU's features.
  hilnas::ReexecWithTimingThreads(argv, static_cast<int>(threads), hilnas::SetBlasCoreForCpu());
  at::set_num_threads(static_cast<int>(threads));
  const hilnas::Arch arch = LoadArch(argc, argv);
  const int64_t decode_tokens = IntArg(argc, argv, "--decode-tokens", "64");
  const int64_t repeats = IntArg(argc, argv, "--repeats", "3");
  const int64_t chunk = IntArg(argc, argv, "--chunk", "1024");
  const std::string dtype = Arg(argc, argv, "--weight-dtype", "f32");
  const std::vector<int64_t> prompts = ParsePrompts(Arg(argc, argv, "--prompt", "256,2048"));
  const std::string kv_dtype = Arg(argc, argv, "--kv-dtype", "f32");
  hilnas::Decoder decoder =
      BuildDecoder(arch, dtype, kv_dtype, Arg(argc, argv, "--aten-decode", "0") == "1");
  // The kernels as agents and `hilnas run` tune them (model/runtime_tuning.h).
  const absl::StatusOr<hilnas::RuntimeTuning> tuning = hilnas::TuneRuntime(
      decoder, std::nullopt, [](const std::string& line) { std::printf("%s\n", line.c_str()); });
  if (!tuning.ok()) {
    std::fprintf(stderr, "step_profile: %s\n", std::string(tuning.status().message()).c_str());
    return 1;
  }
  torch::NoGradGuard no_grad;
  for (int64_t prompt : prompts) {
    std::printf("\n## %s, prompt %lld, %lld thread(s), %s weights, %s KV cache\n",
                arch.name.c_str(), static_cast<long long>(prompt), static_cast<long long>(threads),
                dtype.c_str(), kv_dtype.c_str());
    auto tokens = torch::randint(0, arch.vocab_size, {1, prompt}, torch::kLong);
    auto prefill = [&](hilnas::KvCache& cache) {
      torch::Tensor logits;
      for (int64_t s = 0; s < prompt; s += chunk) {
        logits = decoder.ForwardCached(tokens.narrow(1, s, std::min(chunk, prompt - s)), cache,
                                       /*last_only=*/true);
      }
      return logits;
    };
    // Warm-ups (allocator, kernels' scratch) until one runs on memory
    // already mapped, as agents time (device_agent/protocol.h
    // MemoryUnsettled): glibc's heap can take two or three generations of
    // the same shapes to stop growing, and a timed prefill on fresh pages
    // pays a fault per 4 KiB (36 MiB of them made one process's prefill of
    // full4 with its attention skipped 1.9x slower than another's,
    // bench/data/runtime-compare.md).
    for (int w = 1;; ++w) {
      hilnas::KvCache warm = decoder.NewCache(1, prompt + decode_tokens);
      const int64_t before = hilnas::MinorPageFaults();
      prefill(warm);
      const int64_t faults = hilnas::MinorPageFaults() - before;
      std::printf("warm-up %d: %lld minor faults\n", w, static_cast<long long>(faults));
      if (!hilnas::OneMoreWarmUp(w, 1, faults, warm.bytes())) break;
    }
    // Prefill, `repeats` times on fresh caches.
    double wall = 0;
    int64_t timed_faults = 0;
    torch::Tensor logits;
    hilnas::KvCache cache = decoder.NewCache(1, prompt + decode_tokens);
    {
      hilnas::OpTimer timer;
      for (int64_t r = 0; r < repeats; ++r) {
        cache = decoder.NewCache(1, prompt + decode_tokens);
        const int64_t before = hilnas::MinorPageFaults();
        const auto t0 = Clock::now();
        logits = prefill(cache);
        wall += std::chrono::duration<double>(Clock::now() - t0).count();
        timed_faults += hilnas::MinorPageFaults() - before;
      }
      Report("prefill", wall, repeats, timer);
    }
    std::printf(
        "\nprefill minor faults: %lld in %lld timed runs (the KV cache's own pages: %lld "
        "at most a run on 4 KiB pages)\n",
        static_cast<long long>(timed_faults), static_cast<long long>(repeats),
        static_cast<long long>(cache.bytes() / 4096));
    // Decode at depth = prompt, greedy, on the last prefill's cache.
    wall = 0;
    {
      hilnas::OpTimer timer;
      for (int64_t i = 0; i < decode_tokens; ++i) {
        int64_t next;
        {
          at::RecordFunctionGuard untimed(false);
          next = hilnas::GreedyPick(logits);
        }
        const auto t0 = Clock::now();
        logits = decoder.ForwardToken(next, cache);
        wall += std::chrono::duration<double>(Clock::now() - t0).count();
      }
      Report("decode", wall, decode_tokens, timer);
    }
  }
  return 0;
}

}  // namespace step_profile_main
