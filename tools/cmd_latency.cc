// `hilnas latency collect|fit|eval|predict`: measure architectures through
// the coordinator's agents, fit the GP latency model, report its
// cross-validated quality beside the FLOPs / parameter proxies, predict.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/benchmark_request.h"
#include "latency_model/analytic.h"
#include "latency_model/dataset.h"
#include "latency_model/latency_model.h"
#include "latency_model/metrics.h"
#include "search_space/counts.h"
#include "search_space/sobol.h"
#include "search_space/space.h"
#include "tools/campaign_db.h"
#include "tools/commands.h"
#include "tools/coordinator_client.h"
#include "tools/flags.h"
#include "util/textproto.h"

ABSL_DECLARE_FLAG(std::string, prompt_lengths);
ABSL_DECLARE_FLAG(int32_t, decode_tokens);
ABSL_DECLARE_FLAG(int32_t, repeats);
ABSL_DECLARE_FLAG(int32_t, max_repeats);
ABSL_DECLARE_FLAG(std::string, campaign);
ABSL_DECLARE_FLAG(std::string, db);
ABSL_FLAG(std::string, data, "", "latency: measurements CSV (see `hilnas latency collect`)");
ABSL_FLAG(std::string, model, "", "latency: fitted model file");
ABSL_FLAG(std::string, metric, "ttft", "latency: ttft | decode");
ABSL_FLAG(int32_t, folds, 10, "latency eval: cross-validation folds");
ABSL_FLAG(std::string, plot, "", "latency eval: write a predicted-vs-measured SVG here");
ABSL_FLAG(int32_t, restarts, 3, "latency: GP hyperparameter restarts");
ABSL_FLAG(std::string, gp_prior, "dim-scaled",
          "latency: lengthscale prior, dim-scaled (LogNormal, BoTorch 2024) | gamma (Gamma(3,6))");

namespace hilnas::tools {

namespace {

absl::StatusOr<Space> SpaceFromFlags() {
  SearchSpace proto = DefaultSearchSpace();
  if (const std::string f = absl::GetFlag(FLAGS_space); !f.empty()) {
    proto.Clear();
    absl::Status s = ReadTextProtoFile(f, &proto);
    if (!s.ok()) return s;
  }
  return Space::FromProto(proto);
}

// Sobol draws of the space, one benchmark job each, results as CSV rows.
int Collect() {
  absl::StatusOr<Space> space = SpaceFromFlags();
  if (!space.ok()) return Fail(space.status());
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail(absl::InvalidArgumentError("latency collect needs --out FILE"));
  absl::StatusOr<SobolSample> sample =
      SampleSobol(*space, absl::GetFlag(FLAGS_n), absl::GetFlag(FLAGS_seed));
  if (!sample.ok()) return Fail(sample.status());
  absl::StatusOr<BenchmarkRequest> settings = MeasurementFromFlags();
  if (!settings.ok()) return Fail(settings.status());
  auto stub = UserStub();
  std::vector<std::pair<std::string, Arch>> jobs;
  for (const Arch& arch : sample->archs) {
    BenchmarkRequest request = *settings;
    *request.mutable_arch() = ArchToProto(arch);
    if (absl::Status s = ValidateBenchmarkRequest(request); !s.ok()) return Fail(s);
    absl::StatusOr<std::string> job_id = SubmitBenchmark(*stub, request);
    if (!job_id.ok()) return Fail(job_id.status());
    jobs.push_back({*job_id, arch});
  }
  std::fprintf(stderr, "queued %zu benchmark jobs on %s\n", jobs.size(),
               CoordinatorAddress().c_str());
  const std::string comment = absl::StrCat(
      "hilnas latency collect: ", jobs.size(), " Sobol draws (seed ", absl::GetFlag(FLAGS_seed),
      ") of ",
      absl::GetFlag(FLAGS_space).empty() ? "the default space" : absl::GetFlag(FLAGS_space),
      "\nprompt lengths ", absl::GetFlag(FLAGS_prompt_lengths), ", ",
      absl::GetFlag(FLAGS_decode_tokens), " decode tokens, repeats ", absl::GetFlag(FLAGS_repeats),
      "..", absl::GetFlag(FLAGS_max_repeats), ", random weights, libtorch agents; collected ",
      absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()),
      "\nvalues are per-prompt-length medians of the agent's timed runs; *_se_ms are standard "
      "errors of the medians");
  std::vector<LatencyRow> rows;
  int failed = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    absl::StatusOr<GetJobResponse> waited = WaitForJob(*stub, jobs[i].first, /*timeout_s=*/0);
    if (!waited.ok()) return Fail(waited.status());
    const GetJobResponse& job = *waited;
    if (job.state() == JOB_FAILED) {
      ++failed;
      std::fprintf(stderr, "job %s failed: %s\n", job.job_id().c_str(),
                   job.result().failure_message().c_str());
      continue;
    }
    for (LatencyRow& r :
         LatencyRowsOf(jobs[i].second, job.result(), job.result().device().name())) {
      rows.push_back(std::move(r));
    }
    std::fprintf(stderr, "\rcollected %zu/%zu (%d failed)", i + 1, jobs.size(), failed);
    if ((i + 1) % 10 == 0 || i + 1 == jobs.size()) {  // keep what is measured
      if (absl::Status s = WriteLatencyCsv(out, comment, rows); !s.ok()) return Fail(s);
    }
  }
  std::fprintf(stderr, "\nwrote %zu rows to %s\n", rows.size(), out.c_str());
  return 0;
}

struct Loaded {
  Space space;
  std::vector<LatencyRow> rows;
  LatencyMetric metric;
  int prompt;
};

// The rows of --data (in --space), or of --campaign's measurements (in its
// space) read from the coordinator's --db.
absl::StatusOr<std::pair<Space, std::vector<LatencyRow>>> LoadRows() {
  if (const std::string name = absl::GetFlag(FLAGS_campaign); !name.empty()) {
    absl::StatusOr<LoadedCampaign> c = LoadCampaignFromDb(absl::GetFlag(FLAGS_db), name);
    if (!c.ok()) return c.status();
    absl::StatusOr<Space> space = Space::FromProto(c->record.config.search_space());
    if (!space.ok()) return space.status();
    absl::StatusOr<std::vector<LatencyRow>> rows = CampaignLatencyRows(*c);
    if (!rows.ok()) return rows.status();
    return std::make_pair(*std::move(space), *std::move(rows));
  }
  absl::StatusOr<Space> space = SpaceFromFlags();
  if (!space.ok()) return space.status();
  if (absl::GetFlag(FLAGS_data).empty()) {
    return absl::InvalidArgumentError(
        "give --data FILE (from `hilnas latency collect`) or --campaign NAME [--db FILE]");
  }
  absl::StatusOr<std::vector<LatencyRow>> rows = ReadLatencyCsv(absl::GetFlag(FLAGS_data), *space);
  if (!rows.ok()) return rows.status();
  return std::make_pair(*std::move(space), *std::move(rows));
}

absl::StatusOr<Loaded> LoadData() {
  absl::StatusOr<std::pair<Space, std::vector<LatencyRow>>> loaded = LoadRows();
  if (!loaded.ok()) return loaded.status();
  Space* space = &loaded->first;
  std::vector<LatencyRow>* rows = &loaded->second;
  absl::StatusOr<LatencyMetric> metric = ParseLatencyMetric(absl::GetFlag(FLAGS_metric));
  if (!metric.ok()) return metric.status();
  int prompt = static_cast<int>(absl::GetFlag(FLAGS_prompt_tokens));
  if (rows->empty()) return absl::InvalidArgumentError(absl::GetFlag(FLAGS_data) + ": no rows");
  // Default to the data's first prompt length when the flag was not given.
  bool present = false;
  for (const LatencyRow& r : *rows) present = present || r.prompt_tokens == prompt;
  if (!present) prompt = (*rows)[0].prompt_tokens;
  return Loaded{*std::move(space), *std::move(rows), *metric, prompt};
}

GpOptions GpOptionsFromFlags() {
  GpOptions o;
  o.dimension_scaled_prior = absl::GetFlag(FLAGS_gp_prior) != "gamma";
  o.restarts = absl::GetFlag(FLAGS_restarts);
  o.seed = absl::GetFlag(FLAGS_seed);
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
  const double a = std::log10(lo) - 0.05, b = std::log10(hi) + 0.05;
  const double W = 520, P = 60;
  auto px = [&](double v) { return P + (std::log10(v) - a) / (b - a) * (W - 2 * P); };
  auto py = [&](double v) { return W - P - (std::log10(v) - a) / (b - a) * (W - 2 * P); };
  std::string s = absl::StrFormat(
      "<svg xmlns='http://www.w3.org/2000/svg' width='%.0f' height='%.0f' font-family='sans-serif' "
      "font-size='12'>\n<rect width='100%%' height='100%%' fill='white'/>\n"
      "<text x='%.0f' y='24' text-anchor='middle' font-size='14'>%s</text>\n"
      "<line x1='%.1f' y1='%.1f' x2='%.1f' y2='%.1f' stroke='#999' stroke-dasharray='4'/>\n"
      "<rect x='%.0f' y='%.0f' width='%.0f' height='%.0f' fill='none' stroke='black'/>\n",
      W, W, W / 2, title, px(lo), py(lo), px(hi), py(hi), P, P, W - 2 * P, W - 2 * P);
  for (double t = std::pow(10, std::floor(a)); t <= std::pow(10, b); t *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double v = t * m;
      if (std::log10(v) < a || std::log10(v) > b) continue;
      absl::StrAppend(&s, absl::StrFormat("<text x='%.1f' y='%.0f' text-anchor='middle'>%g</text>\n"
                                          "<text x='%.0f' y='%.1f' text-anchor='end'>%g</text>\n",
                                          px(v), W - P + 16, v, P - 6, py(v) + 4, v));
    }
  }
  absl::StrAppend(
      &s, absl::StrFormat("<text x='%.0f' y='%.0f' text-anchor='middle'>measured ms</text>\n"
                          "<text x='16' y='%.0f' transform='rotate(-90 16 %.0f)' "
                          "text-anchor='middle'>predicted ms (cross-validated)</text>\n",
                          W / 2, W - 20, W / 2, W / 2));
  for (size_t i = 0; i < measured.size(); ++i) {
    absl::StrAppend(&s, absl::StrFormat("<circle cx='%.1f' cy='%.1f' r='2.5' fill='#1f77b4' "
                                        "fill-opacity='0.6'/>\n",
                                        px(measured[i]), py(predicted[i])));
  }
  return s + "</svg>\n";
}

int Fit() {
  absl::StatusOr<Loaded> d = LoadData();
  if (!d.ok()) return Fail(d.status());
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) return Fail(absl::InvalidArgumentError("latency fit needs --out FILE"));
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<LatencyModel> m = LatencyModel::Fit(d->space, d->rows[0].device, d->metric,
                                                     d->prompt, d->rows, GpOptionsFromFlags());
  if (!m.ok()) return Fail(m.status());
  if (absl::Status s = m->Save(out); !s.ok()) return Fail(s);
  const GpHyperparameters& h = m->gp().hyperparameters();
  std::printf("fitted %s at prompt %d on %zu points in %.1f s (%d dropped); wrote %s\n",
              LatencyMetricName(d->metric), d->prompt, m->gp().data().y.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              m->gp().dropped(), out.c_str());
  std::printf("outputscale %.3f, noise %.2e, log marginal likelihood %.1f\nlengthscales:",
              h.outputscale, h.noise, m->gp().log_marginal_likelihood());
  for (size_t i = 0; i < h.lengthscales.size(); ++i) {
    std::printf(" %s=%.2f", m->feature_names()[i].c_str(), h.lengthscales[i]);
  }
  std::printf("\n");
  return 0;
}

int Eval() {
  absl::StatusOr<Loaded> d = LoadData();
  if (!d.ok()) return Fail(d.status());
  const std::vector<const LatencyRow*> rows = LatencyModel::Select(d->prompt, d->rows);
  absl::StatusOr<LatencyModel> full = LatencyModel::Fit(d->space, rows[0]->device, d->metric,
                                                        d->prompt, d->rows, GpOptionsFromFlags());
  if (!full.ok()) return Fail(full.status());
  // Cross-validate on the same features the model uses. Feature scaling is
  // fitted on all rows: it only rescales FLOPs/params, which are known
  // without measuring anything.
  const auto t0 = std::chrono::steady_clock::now();
  absl::StatusOr<LatencyCv> cv =
      CrossValidateLatency(*full, d->rows, absl::GetFlag(FLAGS_folds), GpOptionsFromFlags());
  if (!cv.ok()) return Fail(cv.status());
  const double cv_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::vector<double>& measured = cv->measured_ms;
  const std::vector<double>& predicted = cv->predicted_ms;
  std::vector<double> params, flops, roof;
  const Roofline roofline = MeasureRoofline(absl::GetFlag(FLAGS_threads));
  for (const LatencyRow* r : rows) {
    params.push_back(static_cast<double>(CountParameters(r->arch).model()));
    const bool ttft = d->metric == LatencyMetric::kTtft;
    flops.push_back(ttft ? PrefillFlops(r->arch, d->prompt) : DecodeFlops(r->arch, d->prompt));
    roof.push_back(ttft ? RooflineTtftMs(r->arch, d->prompt, roofline)
                        : RooflineDecodeMs(r->arch, d->prompt, roofline));
  }
  std::printf(
      "%s at prompt %d, %zu architectures, device %s, %d-fold cross-validation (%.1f s), %s "
      "lengthscale prior\n\n",
      LatencyMetricName(d->metric), d->prompt, rows.size(), rows[0]->device.c_str(),
      absl::GetFlag(FLAGS_folds), cv_s, absl::GetFlag(FLAGS_gp_prior).c_str());
  std::printf(
      "| predictor | R^2 (ms) | R^2 (log) | RMSE s | Kendall tau |\n|---|---|---|---|---|\n");
  std::printf("| GP (cross-validated) | %.3f | %.3f | %.4f | %.3f |\n", cv->r2, cv->r2_log,
              cv->rmse_ms / 1e3, cv->tau);
  std::printf("| parameter count | - | - | - | %.3f |\n", KendallTau(measured, params));
  std::printf("| FLOPs | - | - | - | %.3f |\n", KendallTau(measured, flops));
  std::printf("| roofline (%.0f GFLOP/s, %.0f GB/s here) | %.3f | - | %.4f | %.3f |\n",
              roofline.peak_flops / 1e9, roofline.bandwidth / 1e9, RSquared(measured, roof),
              Rmse(measured, roof) / 1e3, KendallTau(measured, roof));
  if (const std::string plot = absl::GetFlag(FLAGS_plot); !plot.empty()) {
    const std::string title =
        absl::StrFormat("%s @ %d tokens: GP %d-fold CV, R^2 %.3f, tau %.3f",
                        LatencyMetricName(d->metric), d->prompt, absl::GetFlag(FLAGS_folds),
                        RSquared(measured, predicted), KendallTau(measured, predicted));
    if (absl::Status s = WriteFileAtomically(plot, Svg(measured, predicted, title)); !s.ok()) {
      return Fail(s);
    }
    std::printf("\nwrote %s\n", plot.c_str());
  }
  return 0;
}

int Predict() {
  absl::StatusOr<Space> space = SpaceFromFlags();
  if (!space.ok()) return Fail(space.status());
  absl::StatusOr<LatencyModel> m = LatencyModel::Load(absl::GetFlag(FLAGS_model), *space);
  if (!m.ok()) return Fail(m.status());
  absl::StatusOr<Arch> arch = ArchFromFlags();
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

}  // namespace

int LatencyCommand(const std::vector<std::string>& args) {
  const std::string sub = args.empty() ? "" : args[0];
  if (const std::string p = absl::GetFlag(FLAGS_gp_prior); p != "dim-scaled" && p != "gamma") {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--gp-prior ", p, " is not one of dim-scaled, gamma")));
  }
  if (sub == "collect") return Collect();
  if (sub == "fit") return Fit();
  if (sub == "eval") return Eval();
  if (sub == "predict") return Predict();
  return Fail(absl::InvalidArgumentError(
      "usage: hilnas latency collect|fit|eval|predict (see `hilnas help`)"));
}

}  // namespace hilnas::tools
