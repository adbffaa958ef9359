// `hilnas coordinator`, `hilnas agents list`, `hilnas bench`: the coordinator
// process and the user-side commands that talk to it over gRPC.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coordinator/audit_log.h"
#include "coordinator/benchmark_service.h"
#include "coordinator/campaign_runner.h"
#include "coordinator/campaign_service.h"
#include "coordinator/campaign_store.h"
#include "coordinator/data_roots.h"
#include "coordinator/evaluators.h"
#include "coordinator/job_store.h"
#include "coordinator/web_server.h"
#include "google/protobuf/util/json_util.h"
#include "proto/benchmark_request.h"
#include "proto/service.grpc.pb.h"
#include "search_space/arch.h"
#include "tools/commands.h"
#include "tools/coordinator_client.h"
#include "tools/flags.h"
#include "util/clock.h"
#include "util/grpc_security.h"
#include "util/textproto.h"

namespace hilnas::tools {

absl::Status FromGrpc(const grpc::Status& s, const std::string& what, bool client_uses_tls) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(
      static_cast<absl::StatusCode>(s.error_code()),
      absl::StrCat(what, ": ", s.error_message(), ConnectionHint(s, client_uses_tls)));
}

absl::Status CoordinatorError(const grpc::Status& s, const CommandLine& cl) {
  return FromGrpc(s, absl::StrCat("coordinator ", CoordinatorAddress(cl)),
                  !ClientTlsOf(cl).ca_file.empty());
}

absl::StatusOr<std::unique_ptr<UserService::Stub>> UserStub(const CommandLine& cl) {
  auto metadata = std::make_shared<CallMetadata>();
  if (const std::string token = UserTokenOf(cl); !token.empty()) {
    metadata->Set(kAuthorizationKey, kBearerPrefix + token);
  }
  // A client certificate, when given, is presented as agents present
  // theirs: a coordinator with mutual TLS asks every connection for one.
  const ClientTls tls = ClientTlsOf(cl);
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(CoordinatorAddress(cl), tls, std::move(metadata));
  if (!channel.ok()) return channel.status();
  return UserService::NewStub(*channel);
}

namespace {

std::chrono::system_clock::time_point In(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

int WaitForSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

absl::StatusOr<Precision> PrecisionFromFlag(const std::string& p) {
  if (p == "fp32" || p == "f32") return FP32;
  if (p == "bf16") return BF16;
  if (p == "fp16" || p == "f16") return FP16;
  if (p == "int8") return INT8_DYNAMIC;
  return absl::InvalidArgumentError(
      absl::StrCat("--precision ", p, " is not one of fp32, bf16, fp16, int8"));
}

absl::StatusOr<BenchmarkRequest> RequestOf(const CommandLine& cl) {
  absl::StatusOr<BenchmarkRequest> r = MeasurementOf(cl);
  if (!r.ok()) return r.status();
  const std::string ckpt = cl.ckpt;
  if (!ckpt.empty()) {
    r->set_checkpoint_dir(ckpt);
  } else {
    absl::StatusOr<Arch> arch = ArchOf(cl);
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
  std::printf("runtime %s %s, %d threads, cpu set %s, governor %s, %s build, precision %s\n",
              d.runtime().c_str(), d.runtime_version().c_str(), d.threads(),
              d.cpu_set().empty() ? "(all)" : d.cpu_set().c_str(),
              d.governor().empty() ? "(unreadable)" : d.governor().c_str(), d.build_type().c_str(),
              Precision_Name(r.request().precision()).c_str());
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

}  // namespace

absl::StatusOr<BenchmarkRequest> MeasurementOf(const CommandLine& cl) {
  BenchmarkRequest r;
  for (absl::string_view p : absl::StrSplit(cl.prompt_lengths, ',', absl::SkipWhitespace())) {
    int v = 0;
    if (!absl::SimpleAtoi(p, &v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt-lengths: \"", p, "\" is not a positive integer"));
    }
    r.add_prompt_lengths(v);
  }
  r.set_decode_tokens(cl.decode_tokens);
  r.set_prefill_chunk(static_cast<int>(cl.prefill_chunk));
  r.set_threads(cl.threads);
  r.set_warmup_runs(cl.warmups);
  r.set_repeats(cl.repeats);
  r.set_max_repeats(cl.max_repeats);
  r.set_max_rel_spread(cl.max_spread);
  r.set_seed(cl.seed);
  absl::StatusOr<Precision> p = PrecisionFromFlag(cl.precision);
  if (!p.ok()) return p.status();
  r.set_precision(*p);
  return r;
}

absl::StatusOr<std::string> SubmitBenchmark(const CommandLine& cl, UserService::Stub& stub,
                                            const BenchmarkRequest& request) {
  SubmitBenchmarkRequest submit;
  *submit.mutable_request() = request;
  submit.set_device(cl.device);
  submit.set_pool(cl.pool);
  SubmitBenchmarkResponse submitted;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(10'000));
  grpc::Status s = stub.SubmitBenchmark(&ctx, submit, &submitted);
  if (!s.ok()) {
    return CoordinatorError(s, cl);
  }
  return submitted.job_id();
}

absl::StatusOr<GetJobResponse> WaitForJob(UserService::Stub& stub, const std::string& job_id,
                                          int64_t timeout_s,
                                          const std::function<void(JobState)>& on_state) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  JobState last = JOB_STATE_UNSPECIFIED;
  while (timeout_s == 0 || std::chrono::steady_clock::now() < give_up) {
    GetJobRequest get;
    get.set_job_id(job_id);
    get.set_wait_ms(10'000);
    GetJobResponse job;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(20'000));
    grpc::Status s = stub.GetJob(&ctx, get, &job);
    if (s.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
        s.error_code() == grpc::StatusCode::NOT_FOUND ||
        s.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      return FromGrpc(s, absl::StrCat("job ", job_id));  // retrying cannot help
    }
    if (!s.ok()) {
      std::fprintf(stderr, "waiting for job %s: %s; retrying\n", job_id.c_str(),
                   s.error_message().c_str());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    if (job.state() != last) {
      if (on_state) on_state(job.state());
      last = job.state();
    }
    if (job.state() == JOB_DONE || job.state() == JOB_FAILED) return job;
  }
  return absl::DeadlineExceededError(
      absl::StrCat("job ", job_id, " not finished after ", timeout_s,
                   " s; it stays queued: ask again with the job id"));
}

namespace {

// Whether HOST:PORT (or [HOST]:PORT, or unix:PATH) can be reached only from
// this machine.
bool IsLoopback(const std::string& address) {
  if (absl::StartsWith(address, "unix:")) return true;
  std::string host = address.substr(0, address.rfind(':'));
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// --user-token (or $HILNAS_USER_TOKEN), named "user", and every
// "NAME TOKEN" line of --user-tokens-file.
absl::StatusOr<std::vector<UserToken>> UserTokensOf(const CommandLine& cl) {
  std::vector<UserToken> tokens;
  if (const std::string t = UserTokenOf(cl); !t.empty()) tokens.push_back({"user", t});
  if (const std::string f = cl.user_tokens_file; !f.empty()) {
    std::ifstream in(f);
    if (!in)
      return absl::InvalidArgumentError(absl::StrCat("--user-tokens-file ", f, ": cannot read"));
    std::string line;
    for (int n = 1; std::getline(in, line); ++n) {
      line = std::string(absl::StripAsciiWhitespace(line));
      if (line.empty() || line[0] == '#') continue;
      std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipWhitespace());
      if (parts.size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("--user-tokens-file ", f, ":", n, ": expected \"NAME TOKEN\""));
      }
      tokens.push_back({parts[0], parts[1]});
    }
  }
  for (const UserToken& t : tokens) {
    if (t.token.size() < 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("user token \"", t.name, "\" has ", t.token.size(),
                       " characters; use at least 16 (e.g. `openssl rand -hex 32`)"));
    }
  }
  return tokens;
}

// --evaluator NAME=TEMPLATE or NAME=slurm:FILE, each checked: a name a
// config can carry, a template with {checkpoint} and {output} or a Slurm
// configuration that reads.
// --canary_request: the drift check's reference benchmark, validated like
// a submission and bounded so re-timing it stays cheap.
absl::StatusOr<BenchmarkRequest> CanaryOf(const CommandLine& cl) {
  if (cl.canary_request == "none") return BenchmarkRequest();
  if (!(cl.canary_tolerance > 0 && cl.canary_tolerance < 10)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--canary_tolerance ", cl.canary_tolerance, " is not in (0, 10)"));
  }
  if (cl.max_drift_requeues < 0 || cl.max_drift_requeues > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max_drift_requeues ", cl.max_drift_requeues, " is not in 0..100"));
  }
  if (cl.canary_request == "default") return DefaultCanary();
  BenchmarkRequest r;
  if (absl::Status s = ReadTextProtoFile(cl.canary_request, &r); !s.ok()) return s;
  if (r.model_case() != BenchmarkRequest::kArch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--canary_request ", cl.canary_request, ": the canary must name an arch (random weights)"));
  }
  if (absl::Status s = ValidateBenchmarkRequest(r); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--canary_request ", cl.canary_request, ": ", s.message()));
  }
  return r;
}

absl::StatusOr<std::map<std::string, std::string>> EvaluatorsOf(const CommandLine& cl) {
  std::map<std::string, std::string> out;
  for (const std::string& e : cl.evaluators) {
    const size_t eq = e.find('=');
    const std::string name = e.substr(0, eq);
    if (eq == std::string::npos || name.empty() || name == "in-process" ||
        name.find_first_not_of(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
            std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--evaluator ", e, ": expected NAME=TEMPLATE with NAME of letters, digits, - _ ."));
    }
    const std::string definition = e.substr(eq + 1);
    if (absl::Status s = CheckEvaluatorDefinition(name, definition); !s.ok()) return s;
    out[name] = definition;
  }
  return out;
}

// A coordinator reachable from other machines must have TLS, both tokens
// and data roots, unless the operator says --insecure.
absl::Status CheckExposure(const CommandLine& cl, bool tls, bool enrollment, bool users) {
  const bool exposed = !IsLoopback(cl.listen) || (!cl.http.empty() && !IsLoopback(cl.http));
  if (!exposed || cl.insecure) return absl::OkStatus();
  std::vector<std::string> missing;
  if (!tls) missing.push_back("--tls-cert/--tls-key (TLS)");
  if (!enrollment) missing.push_back("--token (agents' enrollment token)");
  if (!users) missing.push_back("--user-token (users' token)");
  if (cl.data_roots.empty()) missing.push_back("--data-root (where received paths may point)");
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to listen on ", cl.listen, cl.http.empty() ? "" : absl::StrCat(" / ", cl.http),
      ", which other machines can reach, without ", absl::StrJoin(missing, ", "),
      ": anyone who reaches it could queue jobs, forge results or read files. Give them (see "
      "docs/security.md), listen on 127.0.0.1, or pass --insecure to accept the risk"));
}

}  // namespace

int CoordinatorCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("coordinator takes no arguments"));
  // Signals are taken by sigwait below; block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  const ServerTls tls{cl.tls_cert, cl.tls_key, cl.tls_client_ca};
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = MakeServerCredentials(tls);
  if (!credentials.ok()) return Fail(credentials.status());
  absl::StatusOr<std::vector<UserToken>> user_tokens = UserTokensOf(cl);
  if (!user_tokens.ok()) return Fail(user_tokens.status());
  absl::StatusOr<std::map<std::string, std::string>> evaluators = EvaluatorsOf(cl);
  if (!evaluators.ok()) return Fail(evaluators.status());
  absl::StatusOr<DataRoots> roots = DataRoots::Make(cl.data_roots);
  if (!roots.ok()) return Fail(roots.status());
  const std::string enrollment_token = EnrollmentToken(cl);
  if (absl::Status s = CheckExposure(cl, !tls.cert_file.empty(), !enrollment_token.empty(),
                                     !user_tokens->empty());
      !s.ok()) {
    return Fail(s);
  }

  absl::StatusOr<BenchmarkRequest> canary = CanaryOf(cl);
  if (!canary.ok()) return Fail(canary.status());
  SystemClock clock;
  JobStoreOptions store_options;
  store_options.canary_tolerance = cl.canary_tolerance;
  store_options.max_drift_requeues = cl.max_drift_requeues;
  store_options.lease_ttl_ms = cl.lease_ttl_ms;
  store_options.max_attempts = cl.max_attempts;
  store_options.offline_after_ms = 5 * cl.heartbeat_ms + 10'000;
  absl::StatusOr<std::unique_ptr<JobStore>> store = JobStore::Open(cl.db, &clock, store_options);
  if (!store.ok()) return Fail(store.status());
  absl::StatusOr<std::unique_ptr<CampaignStore>> campaigns = CampaignStore::Open(cl.db, &clock);
  if (!campaigns.ok()) return Fail(campaigns.status());
  absl::StatusOr<std::unique_ptr<AuditLog>> audit = AuditLog::Open(cl.db, &clock);
  if (!audit.ok()) return Fail(audit.status());
  CampaignRunnerOptions runner_options;
  runner_options.work_dir = cl.work_dir.empty() ? cl.db + ".work" : cl.work_dir;
  CampaignRunner runner(campaigns->get(), store->get(), &clock, runner_options,
                        DefaultBackboneLoader(), DefaultEvaluatorFactory(*evaluators));
  CampaignPolicy policy;
  policy.evaluators = *evaluators;
  policy.data_roots = *roots;
  policy.max_campaigns = cl.max_campaigns;
  CampaignServiceImpl campaign_api(campaigns->get(), &runner, policy);
  BenchmarkServiceOptions options;
  options.enrollment_token = enrollment_token;
  options.user_tokens = *user_tokens;
  options.audit = audit->get();
  options.data_roots = *roots;
  options.max_unfinished_jobs = cl.max_queued_jobs;
  options.max_model_bytes = cl.max_model_mb << 20;
  options.heartbeat_interval_ms = cl.heartbeat_ms;
  options.canary = *canary;
  BenchmarkServices services(store->get(), &clock, options, &campaign_api);

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(cl.listen, *credentials, &port);
  builder.SetMaxReceiveMessageSize(cl.max_message_mb << 20);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 256);
  builder.RegisterService(services.agent_service());
  builder.RegisterService(services.user_service());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return Fail(
        absl::UnavailableError(absl::StrCat("cannot listen on ", cl.listen, " (address in use?)")));
  }
  std::printf("hilnas coordinator: serving on port %d (db %s, lease ttl %lld ms, %s, %s, %s, %s)\n",
              port, cl.db.c_str(), static_cast<long long>(store_options.lease_ttl_ms),
              tls.cert_file.empty()
                  ? "plain text"
                  : (tls.client_ca_file.empty() ? "TLS" : "mutual TLS for agents"),
              options.enrollment_token.empty() ? "no enrollment token" : "enrollment token set",
              user_tokens->empty() ? "no user token"
                                   : absl::StrCat(user_tokens->size(), " user tokens").c_str(),
              roots->unrestricted()
                  ? "no data roots"
                  : absl::StrCat("data roots ", absl::StrJoin(roots->roots(), ",")).c_str());
  std::fflush(stdout);
  std::unique_ptr<WebServer> web;
  if (const std::string http = cl.http; !http.empty()) {
    WebServerOptions web_options;
    web_options.address = http;
    web_options.tls_cert_file = tls.cert_file;
    web_options.tls_key_file = tls.key_file;
    web_options.user_tokens = *user_tokens;
    absl::StatusOr<std::unique_ptr<WebServer>> w =
        WebServer::Start(web_options, campaigns->get(), store->get());
    if (!w.ok()) return Fail(w.status());
    web = *std::move(w);
    std::printf("hilnas coordinator: web page on %s://%s:%d/%s\n", web->tls() ? "https" : "http",
                http.substr(0, http.rfind(':')).c_str(), web->port(),
                user_tokens->empty() ? "" : " (user token required)");
    std::fflush(stdout);
    if (const std::string f = cl.http_port_file; !f.empty()) {
      if (absl::Status s = WriteFileAtomically(f, absl::StrCat(web->port(), "\n")); !s.ok()) {
        return Fail(s);
      }
    }
  }
  runner.Start();  // resumes any campaign that was running when the last process died
  if (const std::string f = cl.port_file; !f.empty()) {
    if (absl::Status s = WriteFileAtomically(f, absl::StrCat(port, "\n")); !s.ok()) return Fail(s);
  }
  const int sig = WaitForSignal();
  std::printf("hilnas coordinator: signal %d, shutting down\n", sig);
  runner.Stop();
  web.reset();
  services.Shutdown();
  server->Shutdown(In(2000));
  return 0;
}

int AgentsCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (args.empty() || args[0] != "list") {
    return Fail(absl::InvalidArgumentError("usage: hilnas agents list"));
  }
  absl::StatusOr<std::unique_ptr<UserService::Stub>> stub = UserStub(cl);
  if (!stub.ok()) return Fail(stub.status());
  grpc::ClientContext ctx;
  ctx.set_deadline(In(10'000));
  ListAgentsResponse resp;
  grpc::Status s = (*stub)->ListAgents(&ctx, ListAgentsRequest(), &resp);
  if (!s.ok()) {
    return Fail(CoordinatorError(s, cl));
  }
  if (cl.json) {
    std::string json;
    google::protobuf::util::MessageToJsonString(resp, &json);
    std::printf("%s\n", json.c_str());
    return 0;
  }
  const int64_t now = SystemClock().NowMs();
  std::printf("%-16s %-8s %-8s %-7s %-8s %-14s %-22s %-14s %s\n", "NAME", "STATE", "THREADS",
              "CPUSET", "JOBS", "HEARTBEAT", "DRIFT (TTFT/DECODE)", "RUNTIME", "SOC");
  for (const AgentInfo& a : resp.agents()) {
    const DeviceIdentity& d = a.device();
    // The newest canary against the agent's fastest: "1.03x/1.01x (12)".
    const std::string drift =
        a.canaries() == 0 ? "-"
                          : absl::StrFormat("%.2fx/%.2fx (%d)%s", a.last_canary().ttft_ratio(),
                                            a.last_canary().decode_ratio(), a.canaries(),
                                            a.last_canary().drifted() ? " DRIFT" : "");
    std::printf("%-16s %-8s %-8d %-7s %-8lld %-14s %-22s %-14s %s\n", d.name().c_str(),
                a.state().c_str(), d.threads(), d.cpu_set().empty() ? "-" : d.cpu_set().c_str(),
                static_cast<long long>(a.jobs_done()),
                absl::StrFormat("%.1f s ago", (now - a.last_heartbeat_unix_ms()) / 1000.0).c_str(),
                drift.c_str(), absl::StrCat(d.runtime(), " ", d.runtime_version()).c_str(),
                d.soc().c_str());
  }
  std::printf("%d agents\n", resp.agents_size());
  return 0;
}

int BenchCommand(const std::vector<std::string>& args, const CommandLine& cl) {
  if (!args.empty()) return Fail(absl::InvalidArgumentError("bench takes flags only"));
  absl::StatusOr<BenchmarkRequest> request = RequestOf(cl);
  if (!request.ok()) return Fail(request.status());
  absl::StatusOr<std::unique_ptr<UserService::Stub>> stub = UserStub(cl);
  if (!stub.ok()) return Fail(stub.status());
  absl::StatusOr<std::string> job_id = SubmitBenchmark(cl, **stub, *request);
  if (!job_id.ok()) return Fail(job_id.status());
  std::fprintf(stderr, "job %s queued on %s\n", job_id->c_str(), CoordinatorAddress(cl).c_str());
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

}  // namespace hilnas::tools
