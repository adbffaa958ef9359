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

absl::StatusOr<std::vector<CompareRow>> CompareRuntimes(Runtime& first, Runtime& second,
                                                        const BenchmarkRequest& request,
                                                        const CompareOptions& options) {
  if (options.repeats < 1 || options.decode_tokens < 1 || options.prompts.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "comparison needs prompts, repeats >= 1 and decode tokens >= 1 (got ",
        options.prompts.size(), " prompts, ", options.repeats, ", ", options.decode_tokens, ")"));
  }
  Runtime* runtimes[2] = {&first, &second};
  std::unique_ptr<PreparedModel> models[2];
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<PreparedModel>> m = runtimes[i]->Prepare(request);
    if (!m.ok()) return Named(m.status(), runtimes[i]->name());
    models[i] = *std::move(m);
  }
  std::vector<CompareRow> rows;
  for (int prompt : options.prompts) {
    if (prompt < 1) return absl::InvalidArgumentError(absl::StrCat("prompt length ", prompt));
    std::vector<double> ttft[2], decode[2];
    for (int r = 0; r <= options.repeats; ++r) {
      for (int i = 0; i < 2; ++i) {
        absl::StatusOr<RunTiming> t = models[i]->Run(prompt, options.decode_tokens);
        if (!t.ok()) return Named(t.status(), runtimes[i]->name());
        if (options.progress) {
          options.progress(absl::StrFormat(
              "%s prompt %d %s: TTFT %.1f ms, decode %.2f ms/token", runtimes[i]->name(), prompt,
              r == 0 ? "warm-up" : absl::StrCat("run ", r), t->ttft_ms, t->decode_ms_per_token));
        }
        if (r == 0) continue;
        ttft[i].push_back(t->ttft_ms);
        decode[i].push_back(t->decode_ms_per_token);
      }
    }
    rows.push_back(
        {prompt, Median(ttft[0]), Median(ttft[1]), Median(decode[0]), Median(decode[1])});
  }
  return rows;
}

std::string CompareTable(const std::vector<CompareRow>& rows, const std::string& first_name,
                         const std::string& second_name) {
  std::string out = absl::StrFormat(
      "| prompt | %s TTFT ms | %s TTFT ms | ratio | %s decode ms/tok | %s decode ms/tok | "
      "ratio |\n|---:|---:|---:|---:|---:|---:|---:|\n",
      first_name, second_name, first_name, second_name);
  for (const CompareRow& r : rows) {
    absl::StrAppendFormat(&out, "| %d | %.1f | %.1f | %.2fx | %.2f | %.2f | %.2fx |\n", r.prompt,
                          r.first_ttft_ms, r.second_ttft_ms, r.first_ttft_ms / r.second_ttft_ms,
                          r.first_decode_ms, r.second_decode_ms,
                          r.first_decode_ms / r.second_decode_ms);
  }
  return out;
}

}  // namespace hilnas
