// A new device from a few points (issue 18, item 6): device B's latency
// model fitted on n of B's measurements, alone and on top of device A's
// model (`hilnas latency fit --prior-model`), scored on B's held-out
// architectures. HELP (Lee et al. 2021) and MAPLE-Edge (Nair et al. 2022)
// claim ~10 measurements on an unseen device with transfer.
//
// Each size n is drawn --repeats times: a seeded shuffle of B's rows, the
// first n to fit, all others held out. A's model is fitted once on all of
// A's rows (passes merged). Reports mean and spread of R^2 (ms), Kendall
// tau and the share within +/-10% on the held-out rows, and a plot of
// R^2 against n.
//
// usage: latency_transfer --space FILE --a A.csv --b B.csv [--prompt 512]
//            [--sizes 10,20,40] [--repeats 10] [--out FILE.md] [--plot FILE.svg]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "latency_model/dataset.h"
#include "latency_model/latency_model.h"
#include "latency_model/metrics.h"
#include "util/svg_plot.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

using bench::Arg;
using bench::Die;

struct Score {
  double r2 = 0, tau = 0, within10 = 0;
};

struct Cell {  // one (metric, n, with/without prior)
  std::vector<Score> runs;
  double Mean(double Score::*f) const {
    double s = 0;
    for (const Score& r : runs) s += r.*f;
    return s / runs.size();
  }
  double Sd(double Score::*f) const {
    const double m = Mean(f);
    double s = 0;
    for (const Score& r : runs) s += (r.*f - m) * (r.*f - m);
    return runs.size() > 1 ? std::sqrt(s / (runs.size() - 1)) : 0;
  }
};

Score ScoreOn(const LatencyModel& m, LatencyMetric metric, const std::vector<LatencyRow>& test) {
  std::vector<Arch> archs;
  std::vector<double> truth;
  for (const LatencyRow& r : test) {
    archs.push_back(r.arch);
    truth.push_back(LatencyModel::Measured(metric, r));
  }
  absl::StatusOr<std::vector<LatencyPrediction>> p = m.Predict(archs);
  if (!p.ok()) Die(p.status());
  std::vector<double> pred;
  for (const LatencyPrediction& x : *p) pred.push_back(x.median_ms);
  return {RSquared(truth, pred), KendallTau(truth, pred), ShareWithin(truth, pred, 0.10)};
}

// `repeats` draws of n training points from B: the held-out scores of B's
// model alone and of B's model on A's prior.
std::pair<Cell, Cell> Draws(const Space& space, const std::vector<LatencyRow>& b,
                            LatencyMetric metric, int prompt, int n, int repeats,
                            const LatencyModel& prior) {
  Cell alone, moved;
  for (int rep = 0; rep < repeats; ++rep) {
    std::vector<LatencyRow> shuffled = b;
    std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937_64(1000 * n + rep));
    const std::vector<LatencyRow> train(shuffled.begin(), shuffled.begin() + n);
    const std::vector<LatencyRow> test(shuffled.begin() + n, shuffled.end());
    GpOptions o;
    o.seed = rep;
    absl::StatusOr<LatencyModel> m0 =
        LatencyModel::Fit(space, b[0].device, metric, prompt, train, o);
    absl::StatusOr<LatencyModel> m1 =
        LatencyModel::Fit(space, b[0].device, metric, prompt, train, o, &prior);
    if (!m0.ok()) Die(m0.status());
    if (!m1.ok()) Die(m1.status());
    alone.runs.push_back(ScoreOn(*m0, metric, test));
    moved.runs.push_back(ScoreOn(*m1, metric, test));
  }
  return {alone, moved};
}

// Held-out R^2 against the points measured on B, mean +- sd per curve.
void WritePlot(const std::string& plot_path, const std::string& device,
               const std::vector<int>& sizes, const std::vector<std::string>& plot_series,
               const std::vector<std::vector<std::pair<double, double>>>& curves,
               const std::vector<std::vector<double>>& spreads) {
  double lo = 1;
  for (size_t c = 0; c < curves.size(); ++c) {
    for (size_t i = 0; i < curves[c].size(); ++i) {
      lo = std::min(lo, curves[c][i].second - spreads[c][i]);
    }
  }
  lo = std::max(-0.5, std::floor(lo * 10) / 10);
  SvgPlot plot(560, 400, absl::StrFormat("device B (%s) from n points: held-out R^2", device),
               PlotAxis("points measured on B", sizes.front() * 0.8, sizes.back() * 1.25, true),
               PlotAxis("held-out R^2 (ms), mean +- sd", lo, 1.0));
  const char* colours[] = {"#1f77b4", "#1f77b4", "#d62728", "#d62728"};
  for (size_t c = 0; c < curves.size(); ++c) {
    const PlotStyle line = Stroke(colours[c], 2, c % 2 == 0 ? "5" : "");
    plot.Curve(curves[c], line);
    for (size_t i = 0; i < curves[c].size(); ++i) {
      const auto [x, y] = curves[c][i];
      plot.Segment(x, y - spreads[c][i], x, y + spreads[c][i], Stroke(colours[c], 1));
      plot.Point(x, y, Dot(colours[c], 3.5));
    }
    plot.Legend(plot_series[c], line, /*line=*/true);
  }
  if (absl::Status s = WriteFileAtomically(plot_path, plot.Render()); !s.ok()) Die(s);
  std::printf("wrote %s\n", plot_path.c_str());
}

// --sizes: comma-separated counts of training points, each at least 2.
std::vector<int> ParseSizes(const std::string& text) {
  std::vector<int> sizes;
  for (absl::string_view s : absl::StrSplit(text, ',')) {
    int v = 0;
    if (!absl::SimpleAtoi(s, &v) || v < 2) Die(absl::InvalidArgumentError("--sizes"));
    sizes.push_back(v);
  }
  return sizes;
}

}  // namespace
}  // namespace hilnas

int main(int argc, char** argv) {
  using namespace hilnas;
  const std::string space_path = Arg(argc, argv, "--space", "configs/latency-space.textproto");
  const std::string a_path = Arg(argc, argv, "--a", "");
  const std::string b_path = Arg(argc, argv, "--b", "");
  const int prompt = std::stoi(Arg(argc, argv, "--prompt", "512"));
  const int repeats = std::stoi(Arg(argc, argv, "--repeats", "10"));
  const std::string out = Arg(argc, argv, "--out", "");
  const std::string plot_path = Arg(argc, argv, "--plot", "");
  const std::vector<int> sizes = ParseSizes(Arg(argc, argv, "--sizes", "10,20,40"));
  if (a_path.empty() || b_path.empty()) {
    Die(absl::InvalidArgumentError("usage: latency_transfer --space F --a A.csv --b B.csv"));
  }
  SearchSpace proto;
  if (absl::Status s = ReadTextProtoFile(space_path, &proto); !s.ok()) Die(s);
  absl::StatusOr<Space> space = Space::FromProto(proto);
  if (!space.ok()) Die(space.status());
  absl::StatusOr<std::vector<LatencyRow>> a_rows = ReadLatencyCsv(a_path, *space);
  if (!a_rows.ok()) Die(a_rows.status());
  absl::StatusOr<std::vector<LatencyRow>> b_rows = ReadLatencyCsv(b_path, *space);
  if (!b_rows.ok()) Die(b_rows.status());
  const std::vector<LatencyRow> a = MergePasses(*a_rows);
  std::vector<LatencyRow> b;
  for (const LatencyRow& r : MergePasses(*b_rows)) {
    if (r.prompt_tokens == prompt) b.push_back(r);
  }
  if (b.size() < static_cast<size_t>(sizes.back()) + 10) {
    Die(absl::InvalidArgumentError(
        absl::StrCat(b_path, ": ", b.size(), " rows at prompt ", prompt, "; too few to hold out")));
  }

  std::string md = absl::StrFormat(
      "A: %s (%zu architectures), B: %s (%zu architectures), prompt %d; B's model fitted on n of "
      "B's points, held out: the other %zu - n; %d draws per n (mean +- sd)\n\n",
      a[0].device, a.size(), b[0].device, b.size(), prompt, b.size(), repeats);
  absl::StrAppend(
      &md,
      "| metric | n | R^2 alone | R^2 with A's prior | tau alone | tau with prior | "
      "within 10% alone | within 10% with prior |\n|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> plot_series;
  std::vector<std::vector<std::pair<double, double>>> curves;
  std::vector<std::vector<double>> spreads;
  const auto t0 = std::chrono::steady_clock::now();
  for (LatencyMetric metric : {LatencyMetric::kTtft, LatencyMetric::kDecode}) {
    absl::StatusOr<LatencyModel> prior = LatencyModel::Fit(*space, a[0].device, metric, prompt, a);
    if (!prior.ok()) Die(prior.status());
    std::vector<std::pair<double, double>> alone_curve, prior_curve;
    std::vector<double> alone_sd, prior_sd;
    for (int n : sizes) {
      const auto [alone, moved] = Draws(*space, b, metric, prompt, n, repeats, *prior);
      absl::StrAppend(
          &md,
          absl::StrFormat("| %s | %d | %.3f +- %.3f | **%.3f +- %.3f** | %.3f | **%.3f** | "
                          "%.0f%% | **%.0f%%** |\n",
                          LatencyMetricName(metric), n, alone.Mean(&Score::r2),
                          alone.Sd(&Score::r2), moved.Mean(&Score::r2), moved.Sd(&Score::r2),
                          alone.Mean(&Score::tau), moved.Mean(&Score::tau),
                          100 * alone.Mean(&Score::within10), 100 * moved.Mean(&Score::within10)));
      std::fprintf(stderr, "%s n=%d done (%.0f s)\n", LatencyMetricName(metric), n,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      alone_curve.push_back({n, alone.Mean(&Score::r2)});
      prior_curve.push_back({n, moved.Mean(&Score::r2)});
      alone_sd.push_back(alone.Sd(&Score::r2));
      prior_sd.push_back(moved.Sd(&Score::r2));
    }
    plot_series.push_back(absl::StrCat(LatencyMetricName(metric), ", B alone"));
    curves.push_back(alone_curve);
    spreads.push_back(alone_sd);
    plot_series.push_back(absl::StrCat(LatencyMetricName(metric), ", on A's model"));
    curves.push_back(prior_curve);
    spreads.push_back(prior_sd);
  }
  std::printf("%s", md.c_str());
  if (!out.empty()) {
    if (absl::Status s = WriteFileAtomically(out, md); !s.ok()) Die(s);
  }
  if (!plot_path.empty()) WritePlot(plot_path, b[0].device, sizes, plot_series, curves, spreads);
  return 0;
}
