// `hilnas latency collect|fit|eval|predict`: measure architectures through
// the coordinator's agents, fit the GP latency model, report its
// cross-validated quality beside the FLOPs / parameter proxies, predict.
#include <algorithm>
#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "latency_model/dataset.h"
#include "proto/benchmark_request.h"
#include "search_space/sobol.h"
#include "tools/commands/commands.h"
#include "tools/commands/latency.h"

namespace hilnas::tools {

// Sobol draws of the space, one benchmark job each, results as CSV rows.
int LatencyCollect(const LatencyOptions& cl) {
  absl::StatusOr<Space> space = SpaceOf(cl.space);
  if (!space.ok()) return Fail(space.status());
  const std::string out = cl.out;
  if (out.empty()) return Fail(absl::InvalidArgumentError("latency collect needs --out FILE"));
  absl::StatusOr<SobolSample> sample = SampleSobol(*space, cl.n, cl.measure.seed);
  if (!sample.ok()) return Fail(sample.status());
  absl::StatusOr<BenchmarkRequest> settings = MeasurementOf(cl.measure);
  if (!settings.ok()) return Fail(settings.status());
  absl::StatusOr<std::unique_ptr<UserService::Stub>> user = UserStub(cl.client);
  if (!user.ok()) return Fail(user.status());
  UserService::Stub* stub = user->get();
  const std::string comment = absl::StrCat(
      "hilnas latency collect: ", sample->archs.size(), " Sobol draws (seed ", cl.measure.seed, ") of ",
      cl.space.empty() ? "the default space" : cl.space, ", ", cl.passes,
      " pass(es), each in its own shuffled order after the last\nprompt lengths ",
      cl.measure.prompt_lengths, ", ", cl.measure.decode_tokens, " decode tokens, repeats ", cl.measure.repeats, "..",
      cl.measure.max_repeats, ", random weights at ", cl.measure.precision, " with a ",
      cl.measure.kv_dtype, " KV cache, libtorch agents; collected ",
      absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone()),
      "\nvalues are per-prompt-length medians of the agent's timed runs; *_se_ms are standard "
      "errors of the medians");
  std::vector<LatencyRow> rows;
  int failed = 0;
  for (int pass = 1; pass <= cl.passes; ++pass) {
    // Test-retest (issue 18): every pass measures every architecture, in an
    // order of its own, after the previous pass has finished, so drift
    // between jobs shows up as disagreement between passes.
    std::vector<Arch> order = sample->archs;
    std::mt19937_64 shuffle(cl.measure.seed * 1000003 + static_cast<uint64_t>(pass));
    if (cl.passes > 1) std::shuffle(order.begin(), order.end(), shuffle);
    std::vector<std::pair<std::string, Arch>> jobs;
    for (const Arch& arch : order) {
      BenchmarkRequest request = *settings;
      *request.mutable_arch() = ArchToProto(arch);
      if (absl::Status s = ValidateBenchmarkRequest(request); !s.ok()) return Fail(s);
      absl::StatusOr<std::string> job_id = SubmitBenchmark(cl.client, cl.measure, *stub, request);
      if (!job_id.ok()) return Fail(job_id.status());
      jobs.push_back({*job_id, arch});
    }
    std::fprintf(stderr, "pass %d of %lld: queued %zu benchmark jobs on %s\n", pass,
                 static_cast<long long>(cl.passes), jobs.size(), CoordinatorAddress(cl.client).c_str());
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
        r.pass = pass;
        rows.push_back(std::move(r));
      }
      std::fprintf(stderr, "\rpass %d: collected %zu/%zu (%d failed)", pass, i + 1, jobs.size(),
                   failed);
      if ((i + 1) % 10 == 0 || i + 1 == jobs.size()) {  // keep what is measured
        if (absl::Status s = WriteLatencyCsv(out, comment, rows); !s.ok()) return Fail(s);
      }
    }
    std::fprintf(stderr, "\n");
  }
  std::fprintf(stderr, "\nwrote %zu rows to %s\n", rows.size(), out.c_str());
  return 0;
}

namespace {

int RunLatency(const LatencyOptions& o) {
  if (o.verb == "collect") return LatencyCollect(o);
  if (o.verb == "fit") return LatencyFit(o);
  if (o.verb == "eval") return LatencyEval(o);
  return LatencyPredict(o);
}

}  // namespace

void AddLatencyCommand(Cli& cli) {
  auto [app, o] = cli.Add<LatencyOptions>(
      "latency",
      "collect --space FILE --n N --prompt-lengths L [--passes 2] --out CSV\n"
      "  | fit --data CSV|--campaign C [--space FILE --metric ttft|decode --prompt-tokens N\n"
      "        --prior-model A.model] --out MODEL\n"
      "  | eval --data CSV|--campaign C [--space FILE --metric ttft|decode --folds 10 --plot F.svg\n"
      "        --prior-model A.model]\n"
      "  | predict --model MODEL [--space FILE] --shape NAME|--arch FILE",
      "measure Sobol draws through the agents; fit the GP latency model; cross-validated R^2,\n"
      "RMSE, Kendall tau vs FLOPs/params proxies; predicted latency with a 95% interval;\n"
      "--prior-model: a new device from a few points, on top of another device's model",
      RunLatency);
  app->add_option("verb", o->verb, "collect | fit | eval | predict")
      ->required()
      ->check(CLI::IsMember({"collect", "fit", "eval", "predict"}));
  app->add_option("--space", o->space, "SearchSpace .textproto; default: MobileLLM-Flash Tab. 3")
      ->check(CLI::ExistingFile);
  app->add_option("--n", o->n, "collect: Sobol draws")->check(CLI::Range(1, 1'000'000));
  app->add_option("--passes", o->passes,
                  "collect: measure every architecture this many times, each pass in its own "
                  "shuffled order after the last (test-retest)")
      ->check(CLI::Range(int64_t{1}, int64_t{10}));
  AddMeasurementFlags(app, &o->measure);
  AddClientFlags(app, &o->client, ClientRole::kUser);
  app->add_option("--out", o->out, "collect: the CSV; fit: the model file");
  CLI::Option* data = app->add_option("--data", o->data, "measurements CSV (latency collect)");
  app->add_option("--campaign", o->campaign, "fit/eval on this campaign's measurements")
      ->excludes(data);
  app->add_option("--db", o->db, "the coordinator's SQLite file, for --campaign");
  app->add_option("--metric", o->metric, "ttft | decode")
      ->check(CLI::IsMember({"ttft", "decode"}));
  app->add_option("--prompt-tokens", o->prompt_tokens,
                  "the prompt length to model (the data's first when absent)");
  app->add_option("--prior-model", o->prior_model,
                  "fit/eval: another device's fitted model (same space and metric): its "
                  "prediction becomes the prior mean, affinely mapped to this device's points");
  app->add_option("--folds", o->folds, "eval: cross-validation folds")->check(CLI::Range(2, 1000));
  app->add_option("--plot", o->plot, "eval: write a predicted-vs-measured SVG here");
  app->add_option("--restarts", o->restarts, "GP hyperparameter restarts")
      ->check(CLI::Range(1, 100));
  app->add_option("--gp-prior", o->gp_prior,
                  "lengthscale prior, dim-scaled (LogNormal, BoTorch 2024) | gamma (Gamma(3,6))")
      ->check(CLI::IsMember({"dim-scaled", "gamma"}));
  app->add_option("--model", o->model, "predict: the fitted model file");
  AddArchFlags(app, &o->arch);
}

}  // namespace hilnas::tools
