// `hilnas latency fit | eval | predict` (latency.cc has the command).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "latency_model/analytic.h"
#include "latency_model/dataset.h"
#include "latency_model/latency_model.h"
#include "latency_model/metrics.h"
#include "search_space/counts.h"
#include "tools/campaign_db.h"
#include "tools/commands/latency.h"
#include "util/files.h"
#include "util/textproto.h"
#include "util/svg_plot.h"

namespace hilnas::tools {
namespace {

struct Loaded {
  Space space;
  std::vector<LatencyRow> rows;
  LatencyMetric metric;
  int prompt;
};

// The rows of --data (in --space), or of --campaign's measurements (in its
// space) read from the coordinator's --db.
absl::StatusOr<std::pair<Space, std::vector<LatencyRow>>> LoadRows(const LatencyOptions& cl) {
  if (const std::string name = cl.campaign; !name.empty()) {
    absl::StatusOr<LoadedCampaign> c = LoadCampaignFromDb(cl.db, name);
    if (!c.ok()) return c.status();
    absl::StatusOr<Space> space = Space::FromProto(c->record.config.search_space());
    if (!space.ok()) return space.status();
    absl::StatusOr<std::vector<LatencyRow>> rows = CampaignLatencyRows(*c);
    if (!rows.ok()) return rows.status();
    return std::make_pair(*std::move(space), *std::move(rows));
  }
  absl::StatusOr<Space> space = SpaceOf(cl.space);
  if (!space.ok()) return space.status();
  if (cl.data.empty()) {
    return absl::InvalidArgumentError(
        "give --data FILE (from `hilnas latency collect`) or --campaign NAME [--db FILE]");
  }
  absl::StatusOr<std::vector<LatencyRow>> rows = ReadLatencyCsv(cl.data, *space);
  if (!rows.ok()) return rows.status();
  return std::make_pair(*std::move(space), *std::move(rows));
}

absl::StatusOr<Loaded> LoadData(const LatencyOptions& cl) {
  absl::StatusOr<std::pair<Space, std::vector<LatencyRow>>> loaded = LoadRows(cl);
  if (!loaded.ok()) return loaded.status();
  Space* space = &loaded->first;
  std::vector<LatencyRow>* rows = &loaded->second;
  absl::StatusOr<LatencyMetric> metric = ParseLatencyMetric(cl.metric);
  if (!metric.ok()) return metric.status();
  int prompt = static_cast<int>(cl.prompt_tokens);
  if (rows->empty()) return absl::InvalidArgumentError(cl.data + ": no rows");
  // Default to the data's first prompt length when the flag was not given.
  bool present = false;
  for (const LatencyRow& r : *rows) present = present || r.prompt_tokens == prompt;
  if (!present) prompt = (*rows)[0].prompt_tokens;
  return Loaded{*std::move(space), *std::move(rows), *metric, prompt};
}

GpOptions GpOptionsOf(const LatencyOptions& cl) {
  GpOptions o;
  o.dimension_scaled_prior = cl.gp_prior != "gamma";
  o.restarts = cl.restarts;
  o.seed = cl.measure.seed;
  return o;
}

// Predicted-vs-measured scatter on log axes with the y = x line.
std::string Svg(const std::vector<double>& measured, const std::vector<double>& predicted,
                const std::string& title) {
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < measured.size(); ++i) {
    lo = std::min({lo, measured[i], predicted[i]});
    hi = std::max({hi, measured[i], predicted[i]});
  }
  const double pad = std::pow(10, 0.05);
  SvgPlot plot(520, 520, title, PlotAxis("measured ms", lo / pad, hi * pad, /*log=*/true),
               PlotAxis("predicted ms (cross-validated)", lo / pad, hi * pad, /*log=*/true));
  plot.Segment(lo, lo, hi, hi, Stroke("#999", 1, "4"));
  const PlotStyle dot = Dot("#1f77b4", 2.5, 0.6);
  for (size_t i = 0; i < measured.size(); ++i) plot.Point(measured[i], predicted[i], dot);
  return plot.Render();
}

// --prior-model: another device's model, or none.
absl::StatusOr<std::optional<LatencyModel>> PriorOf(const LatencyOptions& cl, const Space& space) {
  if (cl.prior_model.empty()) return std::optional<LatencyModel>();
  absl::StatusOr<LatencyModel> m = LatencyModel::Load(cl.prior_model, space);
  if (!m.ok()) return m.status();
  return std::optional<LatencyModel>(*std::move(m));
}

}  // namespace

int LatencyFit(const LatencyOptions& cl) {
  absl::StatusOr<Loaded> d = LoadData(cl);
  if (!d.ok()) return Fail(d.status());
  const std::string out = cl.out;
  if (out.empty()) return Fail(absl::InvalidArgumentError("latency fit needs --out FILE"));
  absl::StatusOr<std::optional<LatencyModel>> prior = PriorOf(cl, d->space);
  if (!prior.ok()) return Fail(prior.status());
  d->rows = MergePasses(d->rows);  // one row per architecture, passes averaged
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<LatencyModel> m =
      LatencyModel::Fit(d->space, d->rows[0].device, d->metric, d->prompt, d->rows, GpOptionsOf(cl),
                        prior->has_value() ? &**prior : nullptr);
  if (!m.ok()) return Fail(m.status());
  if (absl::Status s = m->Save(out); !s.ok()) return Fail(s);
  const GpHyperparameters& h = m->gp().hyperparameters();
  std::printf("fitted %s at prompt %d on %zu points in %.1f s (%d dropped); wrote %s\n",
              LatencyMetricName(d->metric), d->prompt, m->gp().data().y.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              m->gp().dropped(), out.c_str());
  if (m->prior() != nullptr) {
    std::printf("prior model: %s's %s prediction, affinely mapped to these points\n",
                m->prior()->device_class().c_str(), LatencyMetricName(m->prior()->metric()));
  }
  std::printf("outputscale %.3f, noise %.2e, log marginal likelihood %.1f\nlengthscales:",
              h.outputscale, h.noise, m->gp().log_marginal_likelihood());
  for (size_t i = 0; i < h.lengthscales.size(); ++i) {
    std::printf(" %s=%.2f", m->feature_names()[i].c_str(), h.lengthscales[i]);
  }
  std::printf("\n");
  return 0;
}

int LatencyEval(const LatencyOptions& cl) {
  absl::StatusOr<Loaded> d = LoadData(cl);
  if (!d.ok()) return Fail(d.status());
  // Several passes: their agreement is the ceiling; the model sees one row
  // per architecture (the passes' geometric mean).
  const bool ttft_metric = d->metric == LatencyMetric::kTtft;
  const RetestAgreement retest = TestRetest(
      d->rows, d->prompt,
      ttft_metric ? +[](const LatencyRow& r) { return r.ttft_ms; }
                  : +[](const LatencyRow& r) { return r.decode_ms; });
  d->rows = MergePasses(d->rows);
  absl::StatusOr<std::optional<LatencyModel>> prior = PriorOf(cl, d->space);
  if (!prior.ok()) return Fail(prior.status());
  const std::vector<const LatencyRow*> rows = LatencyModel::Select(d->prompt, d->rows);
  absl::StatusOr<LatencyModel> full =
      LatencyModel::Fit(d->space, rows[0]->device, d->metric, d->prompt, d->rows, GpOptionsOf(cl),
                        prior->has_value() ? &**prior : nullptr);
  if (!full.ok()) return Fail(full.status());
  // Cross-validate on the same features the model uses. Feature scaling is
  // fitted on all rows: it only rescales FLOPs/params, which are known
  // without measuring anything.
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<LatencyCv> cv = CrossValidateLatency(*full, d->rows, cl.folds, GpOptionsOf(cl));
  if (!cv.ok()) return Fail(cv.status());
  const double cv_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<double>& measured = cv->measured_ms;
  const std::vector<double>& predicted = cv->predicted_ms;
  std::vector<double> params, flops, roof;
  const Roofline roofline = MeasureRoofline(cl.measure.threads);
  for (const LatencyRow* r : rows) {
    params.push_back(static_cast<double>(CountParameters(r->arch).model()));
    const bool ttft = d->metric == LatencyMetric::kTtft;
    flops.push_back(ttft ? PrefillFlops(r->arch, d->prompt) : DecodeFlops(r->arch, d->prompt));
    roof.push_back(ttft ? RooflineTtftMs(r->arch, d->prompt, roofline)
                        : RooflineDecodeMs(r->arch, d->prompt, roofline));
  }
  std::printf(
      "%s at prompt %d, %zu architectures, device %s, %d-fold cross-validation (%.1f s), %s "
      "lengthscale prior%s\n\n",
      LatencyMetricName(d->metric), d->prompt, rows.size(), rows[0]->device.c_str(), cl.folds, cv_s,
      cl.gp_prior.c_str(),
      full->prior() == nullptr
          ? ""
          : absl::StrCat(", prior model of ", full->prior()->device_class()).c_str());
  std::printf(
      "| predictor | R^2 (ms) | R^2 (log) | RMSE s | Kendall tau | within 5%% | within 10%% "
      "|\n|---|---|---|---|---|---|---|\n");
  std::printf("| GP (cross-validated) | %.3f | %.3f | %.4f | %.3f | %.1f%% | %.1f%% |\n", cv->r2,
              cv->r2_log, cv->rmse_ms / 1e3, cv->tau, 100 * ShareWithin(measured, predicted, 0.05),
              100 * ShareWithin(measured, predicted, 0.10));
  if (retest.n >= 2) {
    std::printf(
        "| test-retest ceiling (pass 1 vs 2, %d archs) | %.3f | %.3f | - | %.3f | %.1f%% | "
        "%.1f%% |\n",
        retest.n, retest.r2, retest.r2_log, retest.tau, 100 * retest.within5,
        100 * retest.within10);
  }
  std::printf("| parameter count | - | - | - | %.3f | - | - |\n", KendallTau(measured, params));
  std::printf("| FLOPs | - | - | - | %.3f | - | - |\n", KendallTau(measured, flops));
  std::printf(
      "| roofline (%.0f GFLOP/s, %.0f GB/s here) | %.3f | - | %.4f | %.3f | %.1f%% | %.1f%% |\n",
      roofline.peak_flops / 1e9, roofline.bandwidth / 1e9, RSquared(measured, roof),
      Rmse(measured, roof) / 1e3, KendallTau(measured, roof),
      100 * ShareWithin(measured, roof, 0.05), 100 * ShareWithin(measured, roof, 0.10));
  if (const std::string plot = cl.plot; !plot.empty()) {
    const std::string title = absl::StrFormat(
        "%s @ %d tokens: GP %d-fold CV, R^2 %.3f, tau %.3f", LatencyMetricName(d->metric),
        d->prompt, cl.folds, RSquared(measured, predicted), KendallTau(measured, predicted));
    if (absl::Status s = WriteFileAtomically(plot, Svg(measured, predicted, title)); !s.ok()) {
      return Fail(s);
    }
    std::printf("\nwrote %s\n", plot.c_str());
  }
  return 0;
}

int LatencyPredict(const LatencyOptions& cl) {
  absl::StatusOr<Space> space = SpaceOf(cl.space);
  if (!space.ok()) return Fail(space.status());
  absl::StatusOr<LatencyModel> m = LatencyModel::Load(cl.model, *space);
  if (!m.ok()) return Fail(m.status());
  absl::StatusOr<Arch> arch = ArchOf(cl.arch);
  if (!arch.ok()) return Fail(arch.status());
  if (absl::Status s = space->Contains(*arch); !s.ok()) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("the architecture is not in the model's search space: ", s.message())));
  }
  absl::StatusOr<std::vector<LatencyPrediction>> p = m->Predict({*arch});
  if (!p.ok()) return Fail(p.status());
  std::printf("%s at prompt %d on %s: %.2f ms (95%% interval %.2f .. %.2f)\n",
              LatencyMetricName(m->metric()), m->prompt_tokens(), m->device_class().c_str(),
              (*p)[0].median_ms, (*p)[0].lower_ms, (*p)[0].upper_ms);
  return 0;
}


}  // namespace hilnas::tools
