#include "model/ppd.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <random>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "model/blas_core.h"
#include "util/median.h"

namespace hilnas {
namespace {

// k worker threads that run one task each per round: Start(f) calls f(j) on
// worker j; Wait() returns when all have finished. Workers run without
// autograd (grad mode is per thread).
class Units {
 public:
  explicit Units(int n) : errors_(n) {
    for (int j = 0; j < n; ++j) threads_.emplace_back([this, j] { Loop(j); });
  }
  ~Units() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    for (auto& t : threads_) t.join();
  }

  void Start(std::function<void(int)> task) {
    absl::MutexLock lock(&mu_);
    task_ = std::move(task);
    pending_ = static_cast<int>(threads_.size());
    ++round_;
  }

  // The first worker error of the round, or empty.
  std::string Wait() {
    absl::MutexLock lock(&mu_);
    auto finished = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return pending_ == 0; };
    mu_.Await(absl::Condition(&finished));
    for (auto& e : errors_) {
      if (!e.empty()) return std::exchange(e, "");
    }
    return "";
  }

 private:
  void Loop(int j) {
    torch::NoGradGuard no_grad;
    uint64_t seen = 0;
    for (;;) {
      std::function<void(int)> task;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || round_ != seen; };
        mu_.Await(absl::Condition(&ready));
        if (stop_) return;
        seen = round_;
        task = task_;
      }
      std::string error;
      try {
        task(j);
      } catch (const c10::Error& e) {
        error = e.what_without_backtrace();
      }
      absl::MutexLock lock(&mu_);
      errors_[j] = std::move(error);
      --pending_;
    }
  }

  absl::Mutex mu_;
  uint64_t round_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::function<void(int)> task_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> threads_;  // last: started after the state they read
};

std::vector<int64_t> TopK(const torch::Tensor& logits, int k) {
  auto idx = std::get<1>(logits.view({-1}).topk(k)).contiguous();
  return std::vector<int64_t>(idx.data_ptr<int64_t>(), idx.data_ptr<int64_t>() + k);
}

}  // namespace

void UseOneThreadPerUnit() {
  at::set_num_threads(1);
  SetOpenBlasThreads(1);  // libtorch does not size OpenBLAS's own pool
}

PpdPrediction PredictPpd(int d, int d_bar, int k, int64_t l, double p) {
  PpdPrediction out;
  const double saved = double(d - d_bar) * double(l - 1) * p;
  out.latency_layers = double(d) * l - saved;
  out.compute_layers = out.latency_layers + double(k) * (d - d_bar) * l;
  out.latency_ratio = out.latency_layers / (double(d) * l);
  out.compute_ratio = out.compute_layers / (double(d) * l);
  return out;
}

absl::Status ValidatePpdOptions(const Arch& a, const PpdOptions& options) {
  const int d = a.num_layers, d_bar = options.layer, k = options.k;
  if (2 * d_bar < d || d_bar >= d) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--layer ", d_bar, " is outside [", (d + 1) / 2, ", ", d - 1, "] for ", d,
        " layers: pipelined decoding predicts at d_bar >= d/2 (Theorem 4.1) and before the last "
        "layer"));
  }
  if (k < 1 || k > a.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("--k ", k, " must be in 1..", a.vocab_size, " (the vocabulary)"));
  }
  if (a.kv_prediction.kind != KvPredictionSpec::Kind::kNone) {
    return absl::InvalidArgumentError(
        absl::StrCat(a.name, ": pipelined decoding of KV-prediction models is not supported"));
  }
  const GenerateOptions& g = options.generate;
  if (g.prefill_chunk <= 0 || g.max_new_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("prefill_chunk ", g.prefill_chunk,
                                                   " and max_new_tokens ", g.max_new_tokens,
                                                   " must be positive"));
  }
  return absl::OkStatus();
}

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// One pipelined generation (Section 4): the main computation's cache and
// position, and k sub-computations, each running the last m = d - d_bar
// layers of one top-k guess for the next token on its own worker while the
// main computation finishes the current token.
class PpdRun {
 public:
  PpdRun(Decoder& decoder, const PpdOptions& options, int64_t capacity)
      : decoder_(decoder),
        options_(options),
        d_(decoder.arch().num_layers),
        d_bar_(options.layer),
        k_(options.k),
        m_(d_ - d_bar_),
        main_(decoder.NewCache(1, capacity)),
        guess_(k_),
        sub_hidden_(k_),
        sub_done_(k_),
        rng_(options.seed),
        units_(k_) {
    for (int j = 0; j < k_; ++j) subs_.push_back(decoder.NewCache(1, capacity, m_));
  }

  int64_t CacheBytes() const {
    int64_t bytes = main_.bytes();
    for (const auto& sub : subs_) bytes += sub.bytes();
    return bytes;
  }

  // Prefills the prompt into the main cache, copies it into every sub cache
  // and returns the first token; records the prefill and first-token times.
  int64_t Prefill(const std::vector<int64_t>& prompt, Clock::time_point t0, Stats& s) {
    const int64_t n = static_cast<int64_t>(prompt.size());
    torch::Tensor logits = PrefillChunked(decoder_, prompt, options_.generate.prefill_chunk, main_);
    s.prompt_eval_end_ms = MsSince(t0);
    const int64_t next = logits.view({-1}).argmax().item<int64_t>();
    s.first_token_ms = MsSince(t0);
    for (auto& sub : subs_) sub.CopyPositions(main_, 0, n, 0, m_);
    pos_ = n;
    h_ = Embed(next);
    return next;
  }

  // Runs the current token through the main computation and returns the
  // next token. With `predict` (another token follows), the sub-computations
  // run the top-k guesses for it meanwhile; a matched one's layers are
  // skipped by the main computation in the next step.
  absl::StatusOr<int64_t> Step(bool predict, PpdCounts& c) {
    h_ = decoder_.RunLayers(h_, main_, pos_, from_, d_bar_);
    c.main_layers += d_bar_ - from_;
    if (predict) StartSubs();
    h_ = decoder_.RunLayers(h_, main_, pos_, d_bar_, d_);
    c.main_layers += m_;
    int64_t next = decoder_.Head(h_).view({-1}).argmax().item<int64_t>();
    ++c.decode_steps;
    from_ = 0;
    if (predict) {
      if (absl::Status s = CollectSubs(next, c); !s.ok()) return s;
    }
    ++pos_;
    if (from_ == 0) h_ = Embed(next);
    return next;
  }

 private:
  torch::Tensor Embed(int64_t token) {
    return decoder_.Embed(torch::tensor({token}, torch::kLong).view({1, 1}));
  }

  void StartSubs() {
    guess_ = TopK(decoder_.Head(h_), k_);
    for (auto& sub : subs_) sub.CopyPositions(main_, pos_, pos_ + 1, 0, m_);
    cancel_ = false;
    const int64_t sub_pos = pos_ + 1;
    units_.Start([this, sub_pos](int j) {
      sub_done_[j] = 0;
      torch::Tensor x = Embed(guess_[j]);
      for (int layer = 0; layer < m_ && !cancel_.load(std::memory_order_relaxed); ++layer) {
        x = decoder_.RunLayers(x, subs_[j], sub_pos, layer, layer + 1);
        ++sub_done_[j];
      }
      sub_hidden_[j] = x;
    });
  }

  // Cancels the subs when no guess matched `next`, waits for them, and takes
  // over a matched sub's cache entries and hidden state. A forced match
  // rate (for measuring the speed-up at a given rate) replaces `next`.
  absl::Status CollectSubs(int64_t& next, PpdCounts& c) {
    auto hit = std::find(guess_.begin(), guess_.end(), next);
    if (options_.forced_match_rate >= 0) {
      const bool match =
          std::uniform_real_distribution<double>(0, 1)(rng_) < options_.forced_match_rate;
      hit = match ? guess_.begin() : guess_.end();
      if (match) next = guess_[0];
    }
    if (hit == guess_.end()) cancel_ = true;
    if (std::string err = units_.Wait(); !err.empty()) {
      return absl::InternalError(
          absl::StrCat("pipelined decoding of ", decoder_.arch().name, ": ", err));
    }
    ++c.predictions;
    for (int j = 0; j < k_; ++j) c.sub_layers += sub_done_[j];
    const int j = static_cast<int>(hit - guess_.begin());
    if (hit != guess_.end() && sub_done_[j] == m_) {
      ++c.matches;
      main_.CopyPositions(subs_[j], pos_ + 1, pos_ + 2, 0, m_);
      h_ = sub_hidden_[j];
      from_ = m_;
    }
    return absl::OkStatus();
  }

  Decoder& decoder_;
  const PpdOptions& options_;
  const int d_, d_bar_, k_, m_;  // m_: layers a sub-computation runs
  KvCache main_;
  std::vector<KvCache> subs_;
  int64_t pos_ = 0;  // position of the token being run
  torch::Tensor h_;  // its hidden state
  int from_ = 0;     // its layers already run (by a matched sub)
  std::vector<int64_t> guess_;
  std::vector<torch::Tensor> sub_hidden_;
  std::vector<int> sub_done_;  // layers each sub finished before a cancel
  std::atomic<bool> cancel_{false};
  std::mt19937_64 rng_;
  // Last: destroyed first, so its threads are joined before the state their
  // tasks touch goes away (also on an early return or exception).
  Units units_;
};

}  // namespace

absl::StatusOr<PpdGeneration> PpdGenerate(Decoder& decoder, const std::vector<int64_t>& prompt,
                                          const PpdOptions& options) {
  const Arch& a = decoder.arch();
  if (absl::Status s = ValidatePpdOptions(a, options); !s.ok()) return s;
  if (absl::Status s = ValidatePrompt(prompt, a.vocab_size); !s.ok()) return s;
  const GenerateOptions& g = options.generate;
  const int64_t n = static_cast<int64_t>(prompt.size());
  try {
    torch::NoGradGuard no_grad;
    PpdGeneration out;
    Stats& s = out.stats;
    s.prompt_tokens = n;
    s.prefill_chunk = g.prefill_chunk;
    PpdRun run(decoder, options, n + g.max_new_tokens);
    s.kv_cache_bytes = run.CacheBytes();
    const auto t0 = Clock::now();
    out.tokens.push_back(run.Prefill(prompt, t0, s));
    for (int64_t i = 1; i < g.max_new_tokens; ++i) {
      // The guess is only useful when another token will follow this one.
      absl::StatusOr<int64_t> next = run.Step(i + 1 < g.max_new_tokens, out.counts);
      if (!next.ok()) return next.status();
      out.tokens.push_back(*next);
    }
    s.inference_end_ms = MsSince(t0);
    s.generated_tokens = static_cast<int64_t>(out.tokens.size());
    return out;
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("pipelined decoding of ", a.name, ": ", e.what_without_backtrace()));
  }
}

absl::StatusOr<PpdComparison> ComparePpdWithGreedy(Decoder& decoder,
                                                   const std::vector<std::vector<int64_t>>& prompts,
                                                   const PpdOptions& options) {
  PpdComparison out;
  if (prompts.empty()) return out;
  std::vector<double> ratios, greedy_ms, ppd_ms;
  for (const auto& prompt : prompts) {
    auto greedy = GreedyGenerate(decoder, prompt, options.generate);
    if (!greedy.ok()) return greedy.status();
    auto ppd = PpdGenerate(decoder, prompt, options);
    if (!ppd.ok()) return ppd.status();
    out.identical = out.identical && ppd->tokens == greedy->tokens;
    greedy_ms.push_back(greedy->stats.decode_ms_per_token());
    ppd_ms.push_back(ppd->stats.decode_ms_per_token());
    ratios.push_back(ppd_ms.back() / greedy_ms.back());
    PpdCounts& c = out.counts;
    c.decode_steps += ppd->counts.decode_steps;
    c.predictions += ppd->counts.predictions;
    c.matches += ppd->counts.matches;
    c.main_layers += ppd->counts.main_layers;
    c.sub_layers += ppd->counts.sub_layers;
  }
  out.greedy_ms_per_token = Median(greedy_ms);
  out.ppd_ms_per_token = Median(ppd_ms);
  out.latency_ratio = Median(ratios);
  const double greedy_layers = double(decoder.arch().num_layers) * out.counts.decode_steps;
  out.compute_ratio =
      greedy_layers > 0 ? (out.counts.main_layers + out.counts.sub_layers) / greedy_layers : 0;
  return out;
}

namespace {

// Keeps the residual stream after chosen layers.
class LayerOutputs : public ForwardObserver {
 public:
  explicit LayerOutputs(const std::vector<int>& layers) : layers_(layers) {}
  void OnLayer(int layer, const torch::Tensor&, const torch::Tensor& output) override {
    for (size_t i = 0; i < layers_.size(); ++i) {
      if (layers_[i] == layer + 1) outputs[i] = output;
    }
  }
  std::map<size_t, torch::Tensor> outputs;

 private:
  std::vector<int> layers_;
};

}  // namespace

std::string MatchRates::ToMarkdown() const {
  std::string out = "| k |";
  for (int l : layers) absl::StrAppend(&out, " layer ", l, " |");
  absl::StrAppend(&out, "\n|---:|");
  for (size_t i = 0; i < layers.size(); ++i) absl::StrAppend(&out, "---:|");
  absl::StrAppend(&out, "\n");
  for (size_t ki = 0; ki < ks.size(); ++ki) {
    absl::StrAppend(&out, "| ", ks[ki], " |");
    for (size_t li = 0; li < layers.size(); ++li) {
      absl::StrAppendFormat(&out, " %.2f%% |", 100.0 * rate(li, ki));
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::StatusOr<MatchRates> MeasureMatchRates(Decoder& decoder,
                                             const std::vector<std::vector<int64_t>>& prompts,
                                             int64_t new_tokens, const std::vector<int>& layers,
                                             const std::vector<int>& ks) {
  const Arch& a = decoder.arch();
  for (int l : layers) {
    if (l < 1 || l > a.num_layers) {
      return absl::InvalidArgumentError(absl::StrCat("layer ", l, " is outside 1..", a.num_layers));
    }
  }
  int kmax = 0;
  for (int k : ks) {
    if (k < 1 || k > a.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("k ", k, " is outside 1..", a.vocab_size));
    }
    kmax = std::max(kmax, k);
  }
  if (new_tokens < 1) return absl::InvalidArgumentError("new_tokens must be positive");
  MatchRates r;
  r.layers = layers;
  r.ks = ks;
  r.hits.assign(layers.size(), std::vector<int64_t>(ks.size(), 0));
  GenerateOptions o;
  o.max_new_tokens = new_tokens;
  for (const auto& prompt : prompts) {
    auto g = GreedyGenerate(decoder, prompt, o);
    if (!g.ok()) return g.status();
    try {
      torch::NoGradGuard no_grad;
      std::vector<int64_t> seq = prompt;
      seq.insert(seq.end(), g->tokens.begin(), g->tokens.end() - 1);
      const int64_t n = static_cast<int64_t>(prompt.size());
      LayerOutputs obs(layers);
      auto logits = decoder.Forward(torch::tensor(seq, torch::kLong).view({1, -1}), &obs);
      // Positions n-1 .. n+G-2 choose the G generated tokens.
      auto truth = logits.narrow(1, n - 1, new_tokens).argmax(-1).view({new_tokens, 1});
      for (size_t li = 0; li < layers.size(); ++li) {
        auto early = decoder.Head(obs.outputs.at(li).narrow(1, n - 1, new_tokens));
        auto top = std::get<1>(early.view({new_tokens, -1}).topk(kmax));  // [G, kmax]
        for (size_t ki = 0; ki < ks.size(); ++ki) {
          r.hits[li][ki] += top.narrow(1, 0, ks[ki]).eq(truth).any(1).sum().item<int64_t>();
        }
      }
      r.positions += new_tokens;
    } catch (const c10::Error& e) {
      return absl::InternalError(
          absl::StrCat("measuring match rates of ", a.name, ": ", e.what_without_backtrace()));
    }
  }
  return r;
}

}  // namespace hilnas
