// Hypervolume against trial count for qNEHVI, Sobol-only and random search
// (MobileLLM-Flash Sec. 3.4's stage 2) on a tabular oracle of real
// measurements (bench/oracle_build: pruned from the demo backbone, trained
// briefly, held-out loss; TTFT timed). Every strategy proposes through
// ProposeBatch, the code a campaign runs, restricted to the oracle's rows;
// hypervolume is scored on the oracle's measured (loss, TTFT).
//
// qNEHVI's TTFT objective is a latency GP fitted on a stage-1-like budget of
// the oracle's measured TTFTs (Sobol rows), as a campaign's would be.
// Also times one batch proposal of 8 with 200 observed trials over 2000
// candidates, against one latency-GP fit on the same 200 points.
//
// usage: search_bench --oracle CSV [--space FILE --trials 200 --random-seeds 20
//          --qnehvi-seeds 3 --batch 8 --initial 16 --stage1 48 --csv OUT --svg OUT]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "latency_model/latency_model.h"
#include "search/pareto.h"
#include "search/search.h"
#include "search_space/sobol.h"
#include "util/svg_plot.h"
#include "util/textproto.h"

namespace {

using hilnas::bench::Arg;
using hilnas::bench::Die;

struct Row {
  hilnas::Arch arch;
  double loss, ttft;
};

std::vector<Row> ReadOracle(const std::string& path, const hilnas::Space& space) {
  std::ifstream in(path);
  if (!in) Die(absl::NotFoundError(path + ": cannot open"));
  std::vector<Row> rows;
  std::string line;
  std::vector<double> probe(space.dimensions(), 0.5);
  const hilnas::Arch base = *space.Decode(probe);
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.rfind("index,", 0) == 0) continue;
    std::vector<std::string> f = absl::StrSplit(line, ',');
    if (f.size() < 8) Die(absl::DataLossError(path + ": short line: " + line));
    Row r;
    r.arch = base;
    int layers = 0;
    if (!absl::SimpleAtoi(f[1], &layers) || !absl::SimpleAtoi(f[2], &r.arch.d_model) ||
        !absl::SimpleAtoi(f[3], &r.arch.d_ffn) || !absl::SimpleAtod(f[6], &r.ttft) ||
        !absl::SimpleAtod(f[7], &r.loss)) {
      Die(absl::DataLossError(path + ": bad line: " + line));
    }
    r.arch.num_layers = layers;
    auto pattern = hilnas::ParsePattern(f[4]);
    if (!pattern.ok()) Die(pattern.status());
    r.arch.attention = *pattern;
    if (auto s = space.Contains(r.arch); !s.ok()) Die(s);
    rows.push_back(r);
  }
  return rows;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1))];
}

// Hypervolume after each trial of `order` (indices into rows).
std::vector<double> Curve(const std::vector<Row>& rows, const std::vector<int>& order,
                          const hilnas::Objectives& ref, double total) {
  std::vector<double> out;
  std::vector<hilnas::Objectives> pts;
  for (int i : order) {
    pts.push_back({rows[i].loss, rows[i].ttft});
    out.push_back(hilnas::Hypervolume(pts, ref) / total);
  }
  return out;
}

struct Runner {
  const hilnas::Space* space;
  const std::vector<Row>* rows;
  std::map<std::string, int> index;  // arch key -> row
  const hilnas::LatencyModel* ttft;
  hilnas::Objectives ref;
  int trials, batch, initial;

  std::vector<int> Run(hilnas::Strategy strategy, uint64_t seed) {
    hilnas::SearchState state;
    state.space = space;
    state.ttft = ttft;
    state.reference = ref;
    hilnas::ProposeOptions o;
    for (const Row& r : *rows) o.pool.push_back(r.arch);
    o.seed = seed;
    o.mc_samples = 128;
    o.gp.seed = seed;
    std::vector<int> order;
    while (static_cast<int>(order.size()) < trials) {
      const int n = static_cast<int>(order.size());
      const bool warm_up = strategy == hilnas::Strategy::kQnehvi && n < initial;
      o.strategy = warm_up ? hilnas::Strategy::kSobol : strategy;
      o.q = std::min(batch, trials - n);
      if (warm_up) o.q = std::min(o.q, initial - n);
      o.round = static_cast<uint64_t>(n);
      auto picks = hilnas::ProposeBatch(state, o);
      if (!picks.ok()) Die(picks.status());
      if (picks->empty()) break;
      for (const hilnas::Proposal& p : *picks) {
        const int i = index.at(hilnas::KeyOf(p.arch));
        order.push_back(i);
        state.seen.insert(hilnas::KeyOf(p.arch));
        state.observed.push_back(p.arch);
        state.observed_loss.push_back((*rows)[i].loss);
      }
    }
    return order;
  }
};

// Proposal time: a batch of 8 with 200 observed over 2000 candidates
// (the campaign path: fresh Sobol + front mutations), against one
// latency-GP fit on the same 200 points, both in this run.
void TimeProposal(const hilnas::Space& space, const std::vector<Row>& rows,
                  const hilnas::LatencyModel& ttft, const hilnas::Objectives& ref,
                  const hilnas::LatencyRow& row_template) {
  hilnas::SearchState state;
  state.space = &space;
  state.ttft = &ttft;
  state.reference = ref;
  for (int i = 0; i < 200 && i < static_cast<int>(rows.size()); ++i) {
    state.observed.push_back(rows[i].arch);
    state.observed_loss.push_back(rows[i].loss);
    state.seen.insert(hilnas::KeyOf(rows[i].arch));
  }
  hilnas::ProposeOptions o;
  o.q = 8;
  o.candidates = 2000;
  o.mc_samples = 128;
  o.seed = 9;
  const auto p0 = std::chrono::steady_clock::now();
  auto picks = hilnas::ProposeBatch(state, o);
  if (!picks.ok()) Die(picks.status());
  const double propose_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
  std::vector<hilnas::LatencyRow> fit_rows;
  for (int i = 0; i < 200 && i < static_cast<int>(rows.size()); ++i) {
    hilnas::LatencyRow l = row_template;
    l.arch = rows[i].arch;
    l.ttft_ms = rows[i].ttft;
    l.ttft_se_ms = 0.02 * rows[i].ttft;
    fit_rows.push_back(l);
  }
  const auto f0 = std::chrono::steady_clock::now();
  auto fit =
      hilnas::LatencyModel::Fit(space, "oracle", hilnas::LatencyMetric::kTtft, 256, fit_rows);
  if (!fit.ok()) Die(fit.status());
  const double fit_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
  std::printf(
      "\nproposing a batch of 8 with %zu observed trials over 2000 Sobol candidates + "
      "front mutations, 128 MC samples: %.2f s (%.1fx one latency-GP fit on the same "
      "points, %.2f s)\n",
      state.observed.size(), propose_s, propose_s / fit_s, fit_s);
}

using Curves = std::map<std::string, std::vector<std::vector<double>>>;

// The median over runs of strategy `k`'s hypervolume after `t` trials.
double MedianAt(const Curves& curves, const std::string& k, int t) {
  std::vector<double> v;
  for (const auto& c : curves.at(k)) v.push_back(c[std::min<size_t>(t, c.size()) - 1]);
  return Percentile(v, 0.5);
}

// The table of median hypervolumes, and when each run reaches random
// search's median at the last trial.
void PrintHypervolumes(const Curves& curves, int trials, int random_seeds, int qnehvi_seeds) {
  using hilnas::Strategy;
  const std::string kRandom(StrategyName(Strategy::kRandom)),
      kSobol(StrategyName(Strategy::kSobol)), kQnehvi(StrategyName(Strategy::kQnehvi));
  std::printf(
      "\n| trials | random (median of %d) | Sobol | qNEHVI (median of %d) "
      "|\n|---:|---:|---:|---:|\n",
      random_seeds, qnehvi_seeds);
  for (int t : {8, 16, 32, 64, 96, 128, 160, 200}) {
    if (t > trials) continue;
    std::printf("| %d | %.3f | %.3f | %.3f |\n", t, MedianAt(curves, kRandom, t),
                MedianAt(curves, kSobol, t), MedianAt(curves, kQnehvi, t));
  }
  const double target = MedianAt(curves, kRandom, trials);
  auto reach = [&](const std::vector<double>& c) {
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i] >= target) return static_cast<int>(i + 1);
    }
    return -1;
  };
  std::printf("\nrandom search's median hypervolume at %d trials (%.3f) is reached by:\n", trials,
              target);
  for (const std::string& k : {kQnehvi, kSobol, kRandom}) {
    std::string s;
    for (const auto& c : curves.at(k)) {
      const int r = reach(c);
      absl::StrAppend(&s, s.empty() ? "" : ", ", r < 0 ? std::string("never") : absl::StrCat(r));
    }
    std::printf("  %s: %s\n", k.c_str(), s.c_str());
  }
}

void WriteCsv(const std::string& csv_out, const std::string& oracle, const hilnas::Objectives& ref,
              const Curves& curves) {
  std::ofstream out(csv_out);
  out << "# hilnas bench/search_bench on " << oracle << "; reference loss " << ref[0] << ", TTFT "
      << ref[1] << " ms; hypervolume as a fraction of all rows'\n"
      << "strategy,run,trials,hypervolume_fraction\n";
  for (const auto& [k, cs] : curves) {
    for (size_t r = 0; r < cs.size(); ++r) {
      for (size_t t = 0; t < cs[r].size(); ++t) {
        out << k << "," << r << "," << t + 1 << "," << absl::StrFormat("%.5f", cs[r][t]) << "\n";
      }
    }
  }
}

void WriteSvg(const std::string& svg_out, int trials, size_t rows, const Curves& curves) {
  const hilnas::PlotAxis x("trials", 1, trials);
  hilnas::PlotAxis y("hypervolume / all rows'", 0, 1);
  y.tick_decimals = 1;
  hilnas::SvgPlot plot(640, 420,
                       absl::StrFormat("hypervolume vs trials on the demo oracle (%zu rows; "
                                       "medians)",
                                       rows),
                       x, y);
  using hilnas::Strategy;
  const std::map<std::string, std::string> colour = {
      {std::string(StrategyName(Strategy::kRandom)), "#7f7f7f"},
      {std::string(StrategyName(Strategy::kSobol)), "#2ca02c"},
      {std::string(StrategyName(Strategy::kQnehvi)), "#d62728"}};
  for (const auto& [k, cs] : curves) {
    std::vector<std::pair<double, double>> points;
    for (int t = 1; t <= trials; ++t) points.push_back({t, MedianAt(curves, k, t)});
    const hilnas::PlotStyle line = hilnas::Stroke(colour.at(k), 2);
    plot.Curve(points, line);
    plot.Legend(k, line, /*line=*/true, "lower right");
  }
  std::ofstream(svg_out) << plot.Render();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string oracle = Arg(argc, argv, "--oracle", "bench/data/search-oracle-demo.csv");
  const std::string space_file = Arg(argc, argv, "--space", "configs/demo-space.textproto");
  const int trials = std::stoi(Arg(argc, argv, "--trials", "200"));
  const int random_seeds = std::stoi(Arg(argc, argv, "--random-seeds", "20"));
  const int qnehvi_seeds = std::stoi(Arg(argc, argv, "--qnehvi-seeds", "3"));
  const int batch = std::stoi(Arg(argc, argv, "--batch", "8"));
  const int initial = std::stoi(Arg(argc, argv, "--initial", "16"));
  const int stage1 = std::stoi(Arg(argc, argv, "--stage1", "48"));
  const std::string csv_out = Arg(argc, argv, "--csv", "");
  const std::string svg_out = Arg(argc, argv, "--svg", "");

  hilnas::SearchSpace proto;
  if (auto s = hilnas::ReadTextProtoFile(space_file, &proto); !s.ok()) Die(s);
  auto space = hilnas::Space::FromProto(proto);
  if (!space.ok()) Die(space.status());
  const std::vector<Row> rows = ReadOracle(oracle, *space);
  std::vector<double> losses, ttfts;
  for (const Row& r : rows) losses.push_back(r.loss), ttfts.push_back(r.ttft);
  const hilnas::Objectives ref = {Percentile(losses, 0.75), Percentile(ttfts, 0.75)};
  std::vector<hilnas::Objectives> all;
  for (const Row& r : rows) all.push_back({r.loss, r.ttft});
  const double total = hilnas::Hypervolume(all, ref);
  std::printf(
      "# oracle %s: %zu rows; reference point = 75th percentiles: loss %.3f, TTFT %.2f ms; "
      "hypervolume of all rows %.4g\n",
      oracle.c_str(), rows.size(), ref[0], ref[1], total);

  // Stage 1's stand-in: a latency GP on the measured TTFT of `stage1` rows.
  std::vector<hilnas::LatencyRow> lrows;
  for (int i = 0; i < stage1 && i < static_cast<int>(rows.size()); ++i) {
    hilnas::LatencyRow l;
    l.device = "oracle";
    l.arch = rows[i].arch;  // the oracle's rows are Sobol draws: its head is a Sobol sample
    l.prompt_tokens = 256;
    l.ttft_ms = rows[i].ttft;
    l.ttft_se_ms = 0.02 * rows[i].ttft;
    lrows.push_back(l);
  }
  auto ttft = hilnas::LatencyModel::Fit(*space, "oracle", hilnas::LatencyMetric::kTtft, 256, lrows);
  if (!ttft.ok()) Die(ttft.status());

  Runner runner{&*space, &rows, {}, &*ttft, ref, trials, batch, initial};
  for (size_t i = 0; i < rows.size(); ++i)
    runner.index[hilnas::KeyOf(rows[i].arch)] = static_cast<int>(i);

  using hilnas::Strategy;
  const std::string kRandom(StrategyName(Strategy::kRandom)),
      kSobol(StrategyName(Strategy::kSobol)), kQnehvi(StrategyName(Strategy::kQnehvi));
  Curves curves;
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < random_seeds; ++s) {
    curves[kRandom].push_back(Curve(rows, runner.Run(Strategy::kRandom, 100 + s), ref, total));
  }
  curves[kSobol].push_back(Curve(rows, runner.Run(Strategy::kSobol, 1), ref, total));
  for (int s = 0; s < qnehvi_seeds; ++s) {
    const auto q0 = std::chrono::steady_clock::now();
    curves[kQnehvi].push_back(Curve(rows, runner.Run(Strategy::kQnehvi, 1 + s), ref, total));
    std::fprintf(stderr, "qnehvi seed %d: %.0f s\n", 1 + s,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - q0).count());
  }
  PrintHypervolumes(curves, trials, random_seeds, qnehvi_seeds);
  TimeProposal(*space, rows, *ttft, ref, lrows.empty() ? hilnas::LatencyRow() : lrows[0]);
  std::printf("(searches took %.0f s)\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());

  if (!csv_out.empty()) WriteCsv(csv_out, oracle, ref, curves);
  if (!svg_out.empty()) WriteSvg(svg_out, trials, rows.size(), curves);
  return 0;
}
