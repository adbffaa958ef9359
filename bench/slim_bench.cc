// Slim attention on a multi-head demo checkpoint (issue 8): the conversion
// report, greedy generations against the standard cache over 256 tokens on
// held-out text, cache bytes, and decode time at long context against the
// standard cache measured in the same run.
//
//   build/tools/hilnas backbone --arch configs/demo-mha.textproto --out /tmp/demo-mha
//   build/bench/slim_bench --ckpt /tmp/demo-mha --tokens /tmp/demo-mha/corpus.bin
//       [--contexts 512,2048,8192 --decode 32 --repeats 5 --threads 2]
//
// Decode timing: each context is prefilled once per model (prefill time is
// reported too); then `repeats` rounds alternate standard and slim, each
// round rewinding the cache to the context and decoding `decode` tokens.
// The figure is the median of the per-round slim / standard ratios.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "model/checkpoint.h"
#include "model/generate.h"
#include "model/slim.h"
#include "quality/tokens.h"
#include "util/median.h"

using hilnas::bench::Arg;
using hilnas::bench::Die;

namespace slim_bench_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// A model prefilled to `context` tokens, ready to decode from there again
// and again.
struct Prefilled {
  hilnas::KvCache cache;
  torch::Tensor next;  // [1, 1] the token chosen after the context
  double prefill_ms;
};

Prefilled Prefill(hilnas::Decoder& d, const std::vector<int64_t>& prompt, int64_t decode) {
  torch::NoGradGuard no_grad;
  const int64_t n = static_cast<int64_t>(prompt.size());
  Prefilled p{d.NewCache(1, n + decode), torch::Tensor(), 0};
  const auto t0 = Clock::now();
  torch::Tensor logits = hilnas::PrefillChunked(d, prompt, 1024, p.cache);
  p.prefill_ms = MsSince(t0);
  p.next = logits.view({-1}).argmax().view({1, 1});
  return p;
}

// ms per token for `decode` greedy steps after the context.
double DecodeRound(hilnas::Decoder& d, Prefilled& p, int64_t context, int64_t decode) {
  torch::NoGradGuard no_grad;
  p.cache.SetLength(context);
  torch::Tensor next = p.next;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < decode; ++i) {
    next = d.ForwardCached(next, p.cache, true).view({-1}).argmax().view({1, 1});
  }
  return MsSince(t0) / decode;
}

}  // namespace

int Main(int argc, char** argv) {
  const std::string ckpt = Arg(argc, argv, "--ckpt", "");
  const std::string tokens = Arg(argc, argv, "--tokens", "");
  if (ckpt.empty() || tokens.empty()) {
    std::fprintf(stderr, "usage: slim_bench --ckpt MHA_CHECKPOINT --tokens FILE [...]\n");
    return 2;
  }
  at::set_num_threads(std::stoi(Arg(argc, argv, "--threads", "2")));
  const int64_t decode = std::stoi(Arg(argc, argv, "--decode", "32"));
  const int repeats = std::stoi(Arg(argc, argv, "--repeats", "5"));
  auto standard = hilnas::LoadCheckpoint(ckpt);
  if (!standard.ok()) Die(standard.status());
  hilnas::SlimReport report;
  auto slim = hilnas::ConvertToSlim(*standard, hilnas::SlimOptions{}, &report);
  if (!slim.ok()) Die(slim.status());
  const hilnas::Arch& a = standard->arch();
  std::printf("## Slim attention, %s (%d layers, d_model %d, %d heads, MHA)\n\n", a.name.c_str(),
              a.num_layers, a.d_model, a.num_heads);
  std::printf(
      "Conversion (W_KV = W_K^-1 W_V by a double-precision solve, stored f32):\n\n```\n%s```\n\n",
      report.ToText().c_str());

  auto ids = hilnas::ReadTokenFile(tokens, a.vocab_size);
  if (!ids.ok()) Die(ids.status());
  auto split = hilnas::SplitTokens(std::move(*ids), 0.05, 129);
  if (!split.ok()) Die(split.status());
  auto prompts = hilnas::EvenlySpacedPrompts(split->heldout, 8, 128);
  if (!prompts.ok()) Die(prompts.status());
  hilnas::GenerateOptions g;
  g.max_new_tokens = 256;
  int identical = 0;
  for (const auto& prompt : *prompts) {
    auto x = hilnas::GreedyGenerate(*standard, prompt, g);
    auto y = hilnas::GreedyGenerate(*slim, prompt, g);
    if (!x.ok()) Die(x.status());
    if (!y.ok()) Die(y.status());
    identical += x->tokens == y->tokens;
  }
  std::printf(
      "Greedy generations, 8 held-out prompts of 128 tokens, 256 new tokens each: "
      "**%d of 8 identical** to the standard cache.\n\n",
      identical);

  std::printf(
      "| context | standard KV bytes | slim KV bytes | ratio | standard prefill ms | slim "
      "prefill ms | standard decode ms/token | slim decode ms/token | slim / standard "
      "decode |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);
  std::vector<int64_t> contexts;
  for (auto part : absl::StrSplit(Arg(argc, argv, "--contexts", "512,2048,8192"), ',')) {
    int64_t c = 0;
    if (!absl::SimpleAtoi(part, &c) || c < 1) Die(absl::InvalidArgumentError(std::string(part)));
    contexts.push_back(c);
  }
  for (int64_t context : contexts) {
    if (static_cast<int64_t>(split->heldout.size()) < context) {
      Die(absl::InvalidArgumentError("held-out text shorter than the context"));
    }
    std::vector<int64_t> prompt(split->heldout.begin(), split->heldout.begin() + context);
    Prefilled ps = Prefill(*standard, prompt, decode);
    Prefilled pl = Prefill(*slim, prompt, decode);
    DecodeRound(*standard, ps, context, 4);  // warm-up
    DecodeRound(*slim, pl, context, 4);
    std::vector<double> s_ms, l_ms, ratio;
    for (int r = 0; r < repeats; ++r) {
      s_ms.push_back(DecodeRound(*standard, ps, context, decode));
      l_ms.push_back(DecodeRound(*slim, pl, context, decode));
      ratio.push_back(l_ms.back() / s_ms.back());
    }
    std::printf("| %lld | %lld | %lld | %.3f | %.0f | %.0f | %.3f | %.3f | %.3fx |\n",
                static_cast<long long>(context), static_cast<long long>(ps.cache.bytes()),
                static_cast<long long>(pl.cache.bytes()),
                double(pl.cache.bytes()) / double(ps.cache.bytes()), ps.prefill_ms, pl.prefill_ms,
                hilnas::Median(s_ms), hilnas::Median(l_ms), hilnas::Median(ratio));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace slim_bench_main
