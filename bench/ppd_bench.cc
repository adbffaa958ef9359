// Predictive pipelined decoding on the demo backbone (issue 8): the match
// rate p_correct by layer and k on greedy continuations of held-out text
// (the paper's Tab. 2), then for several (d_bar, k) the measured decode
// speed against greedy decoding and against Theorem 4.1's prediction fed
// with those match rates. Every PPD generation is checked token for token
// against greedy decoding.
//
//   build/bench/ppd_bench --tokens CORPUS [--backbone data/demo-backbone
//       --prompts 8 --prompt 128 --new 256 --configs 4:1,6:1,7:1,6:3,7:3]
//
// Each compute unit is one thread with one BLAS thread (the bench re-execs
// itself with OPENBLAS_NUM_THREADS=1 and a passive OpenMP wait policy).
// Timings are paired: greedy and PPD alternate on the same prompt and the
// figure is the median over prompts of PPD's decode time over greedy's.
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "model/checkpoint.h"
#include "model/ppd.h"
#include "quality/tokens.h"

using hilnas::bench::Arg;
using hilnas::bench::Die;

namespace ppd_bench_main {  // one of hilnas-bench's programs (bench/benches.h)

namespace {

std::vector<int> Ints(const std::string& s) {
  std::vector<int> out;
  for (auto part : absl::StrSplit(s, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(part, &v)) Die(absl::InvalidArgumentError(std::string(part)));
    out.push_back(v);
  }
  return out;
}

}  // namespace

int Main(int argc, char** argv) {
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) {
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
    execv("/proc/self/exe", argv);
  }
  hilnas::UseOneThreadPerUnit();
  const std::string tokens = Arg(argc, argv, "--tokens", "");
  if (tokens.empty()) {
    std::fprintf(stderr, "usage: ppd_bench --tokens FILE [--backbone DIR ...]\n");
    return 2;
  }
  const std::string backbone = Arg(argc, argv, "--backbone", "data/demo-backbone");
  const int n_prompts = std::stoi(Arg(argc, argv, "--prompts", "8"));
  const int prompt_len = std::stoi(Arg(argc, argv, "--prompt", "128"));
  const int new_tokens = std::stoi(Arg(argc, argv, "--new", "256"));
  auto decoder = hilnas::LoadCheckpoint(backbone);
  if (!decoder.ok()) Die(decoder.status());
  const int d = decoder->arch().num_layers;
  auto ids = hilnas::ReadTokenFile(tokens, decoder->arch().vocab_size);
  if (!ids.ok()) Die(ids.status());
  auto split = hilnas::SplitTokens(std::move(*ids), 0.05, prompt_len + 1);
  if (!split.ok()) Die(split.status());
  auto prompts = hilnas::EvenlySpacedPrompts(split->heldout, n_prompts, prompt_len);
  if (!prompts.ok()) Die(prompts.status());

  std::vector<int> layers;
  for (int l = 1; l < d; ++l) layers.push_back(l);
  const std::vector<int> ks = Ints(Arg(argc, argv, "--ks", "1,3,5"));
  auto rates = hilnas::MeasureMatchRates(*decoder, *prompts, new_tokens, layers, ks);
  if (!rates.ok()) Die(rates.status());
  std::printf("## Match rate p_correct, %s (%d layers)\n\n", decoder->arch().name.c_str(), d);
  std::printf(
      "%d held-out prompts of %d tokens, each continued greedily for %d tokens: %lld "
      "positions. Early prediction = final norm + output head on the residual after the "
      "layer.\n\n%s\n",
      n_prompts, prompt_len, new_tokens, static_cast<long long>(rates->positions),
      rates->ToMarkdown().c_str());
  std::fflush(stdout);

  std::printf("## Decode speed, 1 BLAS thread per compute unit, %ld cores\n\n",
              sysconf(_SC_NPROCESSORS_ONLN));
  std::printf(
      "| d_bar | k | units | p_correct (text) | p_correct (run) | greedy ms/token | PPD "
      "ms/token | predicted latency | measured latency | predicted compute | measured "
      "compute | identical |\n");
  std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|\n");
  hilnas::GenerateOptions o;
  o.max_new_tokens = new_tokens;
  // Warm-up.
  if (auto g = hilnas::GreedyGenerate(*decoder, (*prompts)[0], o); !g.ok()) Die(g.status());
  for (absl::string_view config :
       absl::StrSplit(Arg(argc, argv, "--configs", "4:1,6:1,7:1,6:3,7:3"), ',')) {
    std::vector<int> dk = Ints(absl::StrReplaceAll(config, {{":", ","}}));  // "6:3"
    hilnas::PpdOptions p;
    p.layer = dk.at(0);
    p.k = dk.at(1);
    p.generate = o;
    auto cmp = hilnas::ComparePpdWithGreedy(*decoder, *prompts, p);
    if (!cmp.ok()) Die(cmp.status());
    const size_t li = p.layer - 1;
    const size_t ki = std::find(ks.begin(), ks.end(), p.k) - ks.begin();
    const double p_text = ki < ks.size() ? rates->rate(li, ki) : -1;
    auto predicted = hilnas::PredictPpd(d, p.layer, p.k, new_tokens - 1, p_text);
    std::printf(
        "| %d | %d | %d | %.3f | %.3f | %.3f | %.3f | %.3fx | %.3fx | %.2fx | %.2fx | %s |\n",
        p.layer, p.k, p.k + 1, p_text, cmp->counts.p_correct(), cmp->greedy_ms_per_token,
        cmp->ppd_ms_per_token, predicted.latency_ratio, cmp->latency_ratio, predicted.compute_ratio,
        cmp->compute_ratio, cmp->identical ? "yes" : "NO");
    std::fflush(stdout);
    if (!cmp->identical) return 1;
  }
  std::printf(
      "\nLatency and compute are relative to greedy decoding (d layer passes per token); "
      "measured compute counts layer passes run, including sub-computations cut short "
      "when the final layer disagreed.\n");
  return 0;
}

}  // namespace ppd_bench_main
