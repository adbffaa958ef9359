// `hilnas bench`: one benchmark job through the coordinator, its result
// printed as a table.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "proto/benchmark_request.h"
#include "search_space/arch.h"
#include "tools/commands/commands.h"
#include "tools/common.h"
#include "tools/coordinator_client.h"

namespace hilnas::tools {
namespace {

struct BenchOptions {
  ArchFlags model;
  std::string ckpt;
  MeasurementFlags measure;
  ClientFlags client;
  int64_t wait_s = 3600;
  bool json = false;
};

absl::StatusOr<BenchmarkRequest> RequestOf(const BenchOptions& cl) {
  absl::StatusOr<BenchmarkRequest> r = MeasurementOf(cl.measure);
  if (!r.ok()) return r.status();
  const std::string ckpt = cl.ckpt;
  if (!ckpt.empty()) {
    r->set_checkpoint_dir(ckpt);
  } else {
    absl::StatusOr<Arch> arch = ArchOf(cl.model);
    if (!arch.ok()) return arch.status();
    *r->mutable_arch() = ArchToProto(*arch);
  }
  absl::Status valid = ValidateBenchmarkRequest(*r);
  if (!valid.ok()) return valid;
  return r;
}

void PrintResult(const BenchmarkResult& r) {
  const DeviceIdentity& d = r.device();
  std::printf("device %s: %s, %d cores, %.1f GiB, %s\n", d.name().c_str(), d.soc().c_str(),
              d.cores(), d.memory_bytes() / double(1 << 30), d.os().c_str());
  std::printf(
      "runtime %s %s, %d threads, cpu set %s, governor %s, %s build, precision %s, %s KV cache\n",
      d.runtime().c_str(), d.runtime_version().c_str(), d.threads(),
      d.cpu_set().empty() ? "(all)" : d.cpu_set().c_str(),
      d.governor().empty() ? "(unreadable)" : d.governor().c_str(), d.build_type().c_str(),
      Precision_Name(r.request().precision()).c_str(),
      r.request().kv_dtype().empty() ? "f32" : r.request().kv_dtype().c_str());
  if (!d.runtime_kernels().empty()) std::printf("kernels: %s\n", d.runtime_kernels().c_str());
  std::printf(
      "\n| prompt | TTFT median ms | ± s.e. | spread | decode ms/token | ± s.e. | tokens/s | runs "
      "|\n");
  std::printf(
      "|-------:|---------------:|-------:|-------:|----------------:|-------:|---------:|-----:|"
      "\n");
  for (const LatencySummary& s : r.summaries()) {
    int runs = 0;
    for (const LatencySample& x : r.samples()) runs += x.prompt_tokens() == s.prompt_tokens();
    std::printf("| %6d | %14.1f | %6.1f | %6.3f | %15.2f | %6.2f | %8.2f | %4d |\n",
                s.prompt_tokens(), s.ttft_median_ms(), s.ttft_stderr_ms(), s.ttft_rel_spread(),
                s.decode_median_ms_per_token(), s.decode_stderr_ms_per_token(),
                s.decode_tokens_per_s(), runs);
  }
  std::printf("\npeak RSS %.0f MiB, CPU temperature %s, throttling %s, %.1f s on device\n",
              r.peak_rss_bytes() / double(1 << 20),
              r.cpu_temperature_c() > 0 ? absl::StrFormat("%.0f C", r.cpu_temperature_c()).c_str()
                                        : "unreadable",
              r.throttling_suspected() ? "SUSPECTED" : "not detected",
              (r.finished_unix_ms() - r.started_unix_ms()) / 1000.0);
  int noisy = 0;
  double foreign = 0;
  for (const LatencySample& x : r.samples()) {
    noisy += x.noisy();
    foreign = std::max(foreign, x.conditions().foreign_cores());
  }
  std::printf(
      "quiet-machine gate: %d run(s) discarded, %d kept noisy; others' CPU use up to %.2f "
      "cores in the runs kept\n",
      r.discarded_size(), noisy, foreign);
  for (const DiscardedRun& d : r.discarded()) {
    std::printf("  discarded at prompt %d: %s\n", d.sample().prompt_tokens(), d.reason().c_str());
  }
  if (r.has_canary()) {
    const CanaryReading& c = r.canary();
    std::printf(
        "drift check: canary %.2fx TTFT, %.2fx decode of the agent's baseline (%.1f ms, %.3f "
        "ms/token), read %d job(s) before this one%s%s\n",
        c.ttft_ratio(), c.decode_ratio(), c.baseline_ttft_ms(), c.baseline_decode_ms_per_token(),
        c.jobs_since(),
        c.requeues() > 0 ? absl::StrFormat("; re-queued %d time(s) for drift", c.requeues()).c_str()
                         : "",
        c.drifted() ? "; DRIFTED (retries spent)" : "");
  }
  if (r.failure() != FAILURE_NONE) {
    std::printf("FAILED: %s: %s\n", FailureKind_Name(r.failure()).c_str(),
                r.failure_message().c_str());
  }
}

int RunBench(const BenchOptions& cl) {
  absl::StatusOr<BenchmarkRequest> request = RequestOf(cl);
  if (!request.ok()) return Fail(request.status());
  absl::StatusOr<std::unique_ptr<UserService::Stub>> stub = UserStub(cl.client);
  if (!stub.ok()) return Fail(stub.status());
  absl::StatusOr<std::string> job_id = SubmitBenchmark(cl.client, cl.measure, **stub, *request);
  if (!job_id.ok()) return Fail(job_id.status());
  std::fprintf(stderr, "job %s queued on %s\n", job_id->c_str(),
               CoordinatorAddress(cl.client).c_str());
  absl::StatusOr<GetJobResponse> job = WaitForJob(**stub, *job_id, cl.wait_s, [&](JobState state) {
    std::fprintf(stderr, "job %s: %s\n", job_id->c_str(), JobState_Name(state).c_str());
  });
  if (!job.ok()) return Fail(job.status());
  if (cl.json) {
    std::string json;
    google::protobuf::util::JsonPrintOptions o;
    o.add_whitespace = true;
    google::protobuf::util::MessageToJsonString(job->result(), &json, o);
    std::printf("%s\n", json.c_str());
  } else {
    PrintResult(job->result());
  }
  return job->state() == JOB_DONE ? 0 : 1;
}

}  // namespace

void AddBenchCommand(Cli& cli) {
  auto [app, o] = cli.Add<BenchOptions>(
      "bench",
      "--shape NAME|--arch FILE|--ckpt DIR [--prompt-lengths 1024,2048,4096\n"
      "    --decode-tokens 16 --repeats 3 --max-repeats 10 --max-spread 0.05\n"
      "    --precision fp32|bf16|f16|q4_0|q8_0 --kv-dtype f32|f16|q8_0 --device NAME|--pool POOL\n"
      "    --json]",
      "one benchmark job through the coordinator", RunBench);
  auto [shape, arch] = AddArchFlags(app, &o->model);
  app->add_option("--ckpt", o->ckpt, "checkpoint folder, as the agent sees it")
      ->excludes(shape)
      ->excludes(arch);
  AddMeasurementFlags(app, &o->measure);
  AddClientFlags(app, &o->client, ClientRole::kUser);
  app->add_option("--wait-s", o->wait_s, "give up waiting for the result after this long")
      ->check(CLI::Range(int64_t{0}, int64_t{30} * 86'400));
  app->add_flag("--json", o->json, "the result as JSON");
}

}  // namespace hilnas::tools
