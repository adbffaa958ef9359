#include "device_agent/runtime_compare.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/median.h"

namespace hilnas {
namespace {

absl::Status Named(const absl::Status& s, const std::string& runtime) {
  return absl::Status(s.code(), absl::StrCat(runtime, ": ", s.message()));
}

}  // namespace

absl::StatusOr<Comparison> CompareRuntimes(Runtime& first, Runtime& second,
                                           const BenchmarkRequest& request,
                                           const CompareOptions& options) {
  if (options.repeats < 1 || options.decode_tokens < 1 || options.prompts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "comparison needs prompts, repeats >= 1 and decode tokens >= 1 (got ",
        options.prompts.size(), " prompts, ", options.repeats, ", ", options.decode_tokens, ")"));
  }
  for (int prompt : options.prompts) {
    if (prompt < 1) return absl::InvalidArgumentError(absl::StrCat("prompt length ", prompt));
  }
  for (size_t t = 0; t < options.threads.size(); ++t) {
    const int n = options.threads[t];
    if (n < 1) return absl::InvalidArgumentError(absl::StrCat("thread count ", n));
    if (std::find(options.threads.begin(), options.threads.begin() + t, n) !=
        options.threads.begin() + t) {
      return absl::InvalidArgumentError(absl::StrCat("thread count ", n, " given twice"));
    }
  }
  std::vector<int> threads = options.threads;
  if (threads.empty()) threads.push_back(request.threads());  // 0: the runtime's default
  Runtime* runtimes[2] = {&first, &second};
  // models[i][t]: runtime i at threads[t]. Each remembers its thread count
  // (the built-in runtime's intra-op threads and tuned decode form are the
  // process's, set again by each run).
  std::vector<std::unique_ptr<PreparedModel>> models[2];
  for (int i = 0; i < 2; ++i) {
    for (int t : threads) {
      BenchmarkRequest at = request;
      at.set_threads(t);
      absl::StatusOr<std::unique_ptr<PreparedModel>> m = runtimes[i]->Prepare(at);
      if (!m.ok()) return Named(m.status(), runtimes[i]->name());
      models[i].push_back(*std::move(m));
    }
  }
  Comparison out;
  for (int prompt : options.prompts) {
    // [runtime][thread index][round]
    std::vector<std::vector<double>> ttft[2], decode[2];
    for (int i = 0; i < 2; ++i) {
      ttft[i].resize(threads.size());
      decode[i].resize(threads.size());
    }
    for (int r = 0; r <= options.repeats; ++r) {
      for (size_t t = 0; t < threads.size(); ++t) {
        for (int i = 0; i < 2; ++i) {
          // A process's threads at a new count are new threads (libgomp ends
          // the surplus ones when a team shrinks): their first products grow
          // OpenBLAS's buffers and their malloc arenas, 20-25 ms of a 40 ms
          // prompt on a 2-core EPYC. An external runtime's process warms up
          // on its own (llama-bench does); an in-process one gets one untimed
          // prompt first, so both are timed warm.
          if (r > 0 && threads.size() > 1 && runtimes[i]->runs_in_process()) {
            absl::StatusOr<RunTiming> warm = models[i][t]->Run(prompt, 1);
            if (!warm.ok()) return Named(warm.status(), runtimes[i]->name());
          }
          absl::StatusOr<RunTiming> timing = models[i][t]->Run(prompt, options.decode_tokens);
          if (!timing.ok()) return Named(timing.status(), runtimes[i]->name());
          if (options.progress) {
            options.progress(absl::StrFormat(
                "%s prompt %d%s %s: TTFT %.1f ms, decode %.2f ms/token", runtimes[i]->name(),
                prompt, threads.size() > 1 ? absl::StrCat(", ", threads[t], " threads") : "",
                r == 0 ? "warm-up" : absl::StrCat("run ", r), timing->ttft_ms,
                timing->decode_ms_per_token));
          }
          if (r == 0) continue;
          ttft[i][t].push_back(timing->ttft_ms);
          decode[i][t].push_back(timing->decode_ms_per_token);
        }
      }
    }
    for (size_t t = 0; t < threads.size(); ++t) {
      out.rows.push_back({prompt, threads[t], Median(ttft[0][t]), Median(ttft[1][t]),
                          Median(decode[0][t]), Median(decode[1][t])});
    }
    // Each round's gain from its own pair of runs, then the median.
    auto gain = [&](const std::vector<std::vector<double>>& ms, size_t t) {
      std::vector<double> g;
      for (int r = 0; r < options.repeats; ++r) g.push_back(ms[0][r] / ms[t][r]);
      return Median(g);
    };
    for (size_t t = 1; t < threads.size(); ++t) {
      out.scaling.push_back({prompt, threads[0], threads[t], gain(ttft[0], t), gain(ttft[1], t),
                             gain(decode[0], t), gain(decode[1], t)});
    }
  }
  return out;
}

std::string CompareTable(const std::vector<CompareRow>& rows, const std::string& first_name,
                         const std::string& second_name) {
  bool several = false;
  for (const CompareRow& r : rows) several |= r.threads != rows.front().threads;
  std::string out = absl::StrFormat(
      "| prompt |%s %s TTFT ms | %s TTFT ms | ratio | %s decode ms/tok | %s decode ms/tok | "
      "ratio |\n|---:|%s---:|---:|---:|---:|---:|---:|\n",
      several ? " threads |" : "", first_name, second_name, first_name, second_name,
      several ? "---:|" : "");
  for (const CompareRow& r : rows) {
    absl::StrAppendFormat(&out, "| %d |%s %.1f | %.1f | %.2fx | %.2f | %.2f | %.2fx |\n", r.prompt,
                          several ? absl::StrCat(" ", r.threads, " |") : "", r.first_ttft_ms,
                          r.second_ttft_ms, r.first_ttft_ms / r.second_ttft_ms, r.first_decode_ms,
                          r.second_decode_ms, r.first_decode_ms / r.second_decode_ms);
  }
  return out;
}

std::string ScalingTable(const std::vector<ScalingRow>& rows, const std::string& first_name,
                         const std::string& second_name) {
  std::string out = absl::StrFormat(
      "| prompt | threads | %s TTFT gain | %s TTFT gain | %s / %s | %s decode gain | "
      "%s decode gain | %s / %s |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n",
      first_name, second_name, first_name, second_name, first_name, second_name, first_name,
      second_name);
  for (const ScalingRow& r : rows) {
    absl::StrAppendFormat(&out, "| %d | %d -> %d | %.2fx | %.2fx | %.2f | %.2fx | %.2fx | %.2f |\n",
                          r.prompt, r.from_threads, r.to_threads, r.first_ttft_gain,
                          r.second_ttft_gain, r.first_ttft_gain / r.second_ttft_gain,
                          r.first_decode_gain, r.second_decode_gain,
                          r.first_decode_gain / r.second_decode_gain);
  }
  return out;
}

}  // namespace hilnas
