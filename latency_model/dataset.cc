#include "latency_model/dataset.h"

#include <cmath>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "latency_model/metrics.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

constexpr char kHeaderV1[] =
    "device,num_layers,d_model,d_ffn,pattern,prompt_tokens,ttft_ms,ttft_se_ms,decode_ms,"
    "decode_se_ms";
constexpr char kHeaderV2[] =
    "device,num_layers,d_model,d_ffn,pattern,prompt_tokens,ttft_ms,ttft_se_ms,decode_ms,"
    "decode_se_ms,pass";
constexpr char kHeader[] =
    "device,num_layers,d_model,d_ffn,pattern,prompt_tokens,ttft_ms,ttft_se_ms,decode_ms,"
    "decode_se_ms,pass,canary_ratio";

}  // namespace

absl::Status WriteLatencyCsv(const std::string& path, const std::string& comment,
                             const std::vector<LatencyRow>& rows) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(comment, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&out, "# ", line, "\n");
  }
  absl::StrAppend(&out, kHeader, "\n");
  for (const LatencyRow& r : rows) {
    absl::StrAppend(
        &out, absl::StrFormat("%s,%d,%d,%d,%s,%d,%.4f,%.4f,%.5f,%.5f,%d,%.4f\n", r.device,
                              r.arch.num_layers, r.arch.d_model, r.arch.d_ffn,
                              PatternString(r.arch.attention), r.prompt_tokens, r.ttft_ms,
                              r.ttft_se_ms, r.decode_ms, r.decode_se_ms, r.pass, r.canary_ratio));
  }
  return WriteFileAtomically(path, out);
}

namespace {

// One data line of a latency CSV with `fields` columns (12, or 11 and 10 in
// older files); errors name the file, the line and the column.
absl::StatusOr<LatencyRow> ParseLatencyRow(const std::string& path, int line_no,
                                           absl::string_view line, size_t fields,
                                           const Space& space) {
  std::vector<std::string> f = absl::StrSplit(line, ',');
  if (f.size() != fields) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", line_no, ": ", f.size(), " fields, expected ", fields));
  }
  int pass = 1;
  if (fields >= 11 && (!absl::SimpleAtoi(f[10], &pass) || pass < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", line_no, ": column 11 (pass) \"", f[10], "\" is not 1, 2, ..."));
  }
  double canary_ratio = 0;
  if (fields >= 12 && (!absl::SimpleAtod(f[11], &canary_ratio) || !(canary_ratio >= 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ":", line_no, ": column 12 (canary_ratio) \"", f[11], "\" is not a ratio >= 0"));
  }
  LatencyRow r;
  r.device = f[0];
  int ints[4];
  double reals[4];
  const int int_cols[4] = {1, 2, 3, 5};
  for (int i = 0; i < 4; ++i) {
    if (!absl::SimpleAtoi(f[int_cols[i]], &ints[i])) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": column ",
                                                     int_cols[i] + 1, " \"", f[int_cols[i]],
                                                     "\" is not an integer"));
    }
  }
  for (int i = 0; i < 4; ++i) {
    if (!absl::SimpleAtod(f[6 + i], &reals[i])) {
      return absl::InvalidArgumentError(absl::StrCat(path, ":", line_no, ": column ", 7 + i, " \"",
                                                     f[6 + i], "\" is not a number"));
    }
  }
  absl::StatusOr<std::vector<Attention>> pattern = ParsePattern(f[4]);
  if (!pattern.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", line_no, ": pattern: ", pattern.status().message()));
  }
  // The space's base supplies every field that is not searched.
  absl::StatusOr<Arch> base = space.Decode(std::vector<double>(space.dimensions(), 0.0));
  if (!base.ok()) return base.status();
  r.arch = *base;
  r.arch.num_layers = ints[0];
  r.arch.d_model = ints[1];
  r.arch.d_ffn = ints[2];
  r.arch.attention = *pattern;
  if (absl::Status member = space.Contains(r.arch); !member.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ":", line_no, ": not in the search space: ", member.message()));
  }
  r.prompt_tokens = ints[3];
  r.ttft_ms = reals[0];
  r.ttft_se_ms = reals[1];
  r.decode_ms = reals[2];
  r.decode_se_ms = reals[3];
  r.pass = pass;
  r.canary_ratio = canary_ratio;
  return r;
}

}  // namespace

absl::StatusOr<std::vector<LatencyRow>> ReadLatencyCsv(const std::string& path,
                                                       const Space& space) {
  std::string text;
  absl::Status s = ReadFileToString(path, &text);
  if (!s.ok()) return s;
  std::vector<LatencyRow> rows;
  int line_no = 0;
  bool header = false;
  // 10 fields in files from before test-retest passes, 11 before the canary.
  size_t fields = 12;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (!header) {
      if (line != kHeader && line != kHeaderV2 && line != kHeaderV1) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ":", line_no, ": header is not \"", kHeader, "\""));
      }
      fields = line == kHeader ? 12 : line == kHeaderV2 ? 11 : 10;
      header = true;
      continue;
    }
    HILNAS_ASSIGN_OR_RETURN(LatencyRow r, ParseLatencyRow(path, line_no, line, fields, space));
    rows.push_back(std::move(r));
  }
  if (!header) return absl::InvalidArgumentError(absl::StrCat(path, ": no header line"));
  return rows;
}

std::vector<LatencyRow> LatencyRowsOf(const Arch& arch, const BenchmarkResult& result,
                                      const std::string& device) {
  std::vector<LatencyRow> rows;
  for (const LatencySummary& m : result.summaries()) {
    LatencyRow r;
    r.device = device;
    r.arch = arch;
    r.prompt_tokens = m.prompt_tokens();
    r.ttft_ms = m.ttft_median_ms();
    r.ttft_se_ms = m.ttft_stderr_ms();
    r.decode_ms = m.decode_median_ms_per_token();
    r.decode_se_ms = m.decode_stderr_ms_per_token();
    r.canary_ratio = result.has_canary() ? result.canary().ttft_ratio() : 0;
    rows.push_back(r);
  }
  return rows;
}

namespace {

std::string RowKey(const LatencyRow& r) {
  return absl::StrCat(r.device, "|", ArchKey(ArchToProto(r.arch)), "|", r.prompt_tokens);
}

}  // namespace

std::vector<LatencyRow> MergePasses(const std::vector<LatencyRow>& rows) {
  std::map<std::string, std::vector<const LatencyRow*>> groups;
  std::vector<std::string> order;
  for (const LatencyRow& r : rows) {
    auto& g = groups[RowKey(r)];
    if (g.empty()) order.push_back(RowKey(r));
    g.push_back(&r);
  }
  std::vector<LatencyRow> out;
  for (const std::string& key : order) {
    const auto& g = groups[key];
    LatencyRow m = *g[0];
    if (g.size() > 1) {
      double log_ttft = 0, log_decode = 0, ttft_var = 0, decode_var = 0;
      for (const LatencyRow* r : g) {
        log_ttft += std::log(std::max(r->ttft_ms, 1e-9));
        log_decode += std::log(std::max(r->decode_ms, 1e-9));
        ttft_var += r->ttft_se_ms * r->ttft_se_ms;
        decode_var += r->decode_se_ms * r->decode_se_ms;
      }
      const double n = static_cast<double>(g.size());
      m.ttft_ms = std::exp(log_ttft / n);
      m.decode_ms = std::exp(log_decode / n);
      m.ttft_se_ms = std::sqrt(ttft_var) / n;
      m.decode_se_ms = std::sqrt(decode_var) / n;
      m.pass = 1;
      for (const LatencyRow* r : g) m.canary_ratio = std::max(m.canary_ratio, r->canary_ratio);
    }
    out.push_back(std::move(m));
  }
  return out;
}

RetestAgreement TestRetest(const std::vector<LatencyRow>& rows, int prompt_tokens,
                           double (*value)(const LatencyRow&)) {
  std::map<std::string, double> first;
  for (const LatencyRow& r : rows) {
    if (r.pass == 1 && r.prompt_tokens == prompt_tokens) first[RowKey(r)] = value(r);
  }
  std::vector<double> a, b, log_a, log_b;
  for (const LatencyRow& r : rows) {
    if (r.pass != 2 || r.prompt_tokens != prompt_tokens) continue;
    auto it = first.find(RowKey(r));
    if (it == first.end() || !(it->second > 0) || !(value(r) > 0)) continue;
    a.push_back(it->second);
    b.push_back(value(r));
    log_a.push_back(std::log(it->second));
    log_b.push_back(std::log(value(r)));
  }
  RetestAgreement g;
  g.n = static_cast<int>(a.size());
  if (g.n < 2) return g;
  g.r2 = RSquared(a, b);
  g.r2_log = RSquared(log_a, log_b);
  g.tau = KendallTau(a, b);
  g.within5 = ShareWithin(a, b, 0.05);
  g.within10 = ShareWithin(a, b, 0.10);
  return g;
}

}  // namespace hilnas
