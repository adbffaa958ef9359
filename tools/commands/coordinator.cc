// `hilnas coordinator`: the coordinator process: the agent registry, job
// queue and campaigns in one SQLite file, gRPC for agents and users, and the
// web page with --http.
#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coordinator/audit_log.h"
#include "coordinator/benchmark_service.h"
#include "coordinator/campaign_runner.h"
#include "coordinator/campaign_service.h"
#include "coordinator/campaign_store.h"
#include "coordinator/evaluators.h"
#include "coordinator/job_store.h"
#include "coordinator/web_server.h"
#include "proto/benchmark_request.h"
#include "tools/commands/commands.h"
#include "tools/commands/coordinator.h"
#include "tools/common.h"
#include "tools/coordinator_client.h"
#include "util/clock.h"
#include "util/data_roots.h"
#include "util/db_owner.h"
#include "util/files.h"
#include "util/grpc_security.h"
#include "util/status_macros.h"
#include "util/textproto.h"

namespace hilnas::tools {
namespace {


int WaitForSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
  return sig;
}

void PrintServing(const CoordinatorOptions& cl, const Policy& p, int port, int64_t lease_ttl_ms) {
  std::printf("hilnas coordinator: serving on port %d (db %s, lease ttl %lld ms, %s, %s, %s, %s)\n",
              port, cl.db.c_str(), static_cast<long long>(lease_ttl_ms),
              p.tls.cert_file.empty()
                  ? "plain text"
                  : (p.tls.client_ca_file.empty() ? "TLS" : "mutual TLS for agents"),
              p.enrollment_token.empty() ? "no enrollment token" : "enrollment token set",
              p.user_tokens.empty() ? "no user token"
                                    : absl::StrCat(p.user_tokens.size(), " user tokens").c_str(),
              p.roots.unrestricted()
                  ? "no data roots"
                  : absl::StrCat("data roots ", absl::StrJoin(p.roots.roots(), ",")).c_str());
  std::fflush(stdout);
}

// The web page on --http, its port written to --http-port-file.
absl::StatusOr<std::unique_ptr<WebServer>> StartWeb(const CoordinatorOptions& cl, const Policy& p,
                                                    CampaignStore* campaigns, JobStore* store) {
  if (cl.http.empty()) return nullptr;
  WebServerOptions web_options;
  web_options.address = cl.http;
  web_options.tls_cert_file = p.tls.cert_file;
  web_options.tls_key_file = p.tls.key_file;
  web_options.user_tokens = p.user_tokens;
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<WebServer> web,
                          WebServer::Start(web_options, campaigns, store));
  std::printf("hilnas coordinator: web page on %s://%s:%d/%s\n", web->tls() ? "https" : "http",
              cl.http.substr(0, cl.http.rfind(':')).c_str(), web->port(),
              p.user_tokens.empty() ? "" : " (user token required)");
  std::fflush(stdout);
  if (!cl.http_port_file.empty()) {
    HILNAS_RETURN_IF_ERROR(WriteFileAtomically(cl.http_port_file, absl::StrCat(web->port(), "\n")));
  }
  return web;
}

// The stores, the campaign runner and the gRPC services over one SQLite
// file, until SIGINT or SIGTERM.
absl::Status Serve(const CoordinatorOptions& cl, const Policy& p) {
  // Ownership first (util/db_owner.h): a second coordinator on this file
  // stops here, before it opens a store or resumes a campaign.
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<DbOwnerLock> owner,
                          DbOwnerLock::Acquire(cl.db, cl.listen));
  SystemClock clock;
  JobStoreOptions store_options;
  store_options.canary_tolerance = cl.canary_tolerance;
  store_options.max_drift_requeues = cl.max_drift_requeues;
  store_options.lease_ttl_ms = cl.lease_ttl_ms;
  store_options.max_attempts = cl.max_attempts;
  store_options.offline_after_ms = 5 * cl.heartbeat_ms + 10'000;
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<JobStore> store,
                          JobStore::Open(cl.db, &clock, store_options));
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<CampaignStore> campaigns,
                          CampaignStore::Open(cl.db, &clock));
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<AuditLog> audit, AuditLog::Open(cl.db, &clock));
  CampaignRunnerOptions runner_options;
  runner_options.work_dir = cl.work_dir.empty() ? cl.db + ".work" : cl.work_dir;
  CampaignRunner runner(campaigns.get(), store.get(), &clock, runner_options,
                        DefaultBackboneLoader(), DefaultEvaluatorFactory(p.evaluators));
  CampaignPolicy policy;
  policy.evaluators = p.evaluators;
  policy.data_roots = p.roots;
  policy.max_campaigns = cl.max_campaigns;
  CampaignServiceImpl campaign_api(campaigns.get(), &runner, policy);
  BenchmarkServiceOptions options;
  options.enrollment_token = p.enrollment_token;
  options.user_tokens = p.user_tokens;
  options.audit = audit.get();
  options.data_roots = p.roots;
  options.max_unfinished_jobs = cl.max_queued_jobs;
  options.max_model_bytes = cl.max_model_mb << 20;
  options.heartbeat_interval_ms = cl.heartbeat_ms;
  options.canary = p.canary;
  BenchmarkServices services(store.get(), &clock, options, &campaign_api);

  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(cl.listen, p.credentials, &port);
  builder.SetMaxReceiveMessageSize(cl.max_message_mb << 20);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, 256);
  builder.RegisterService(services.agent_service());
  builder.RegisterService(services.user_service());
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", cl.listen, " (address in use?)"));
  }
  HILNAS_RETURN_IF_ERROR(
      owner->SetAddress(absl::StrCat(cl.listen.substr(0, cl.listen.rfind(':')), ":", port)));
  PrintServing(cl, p, port, store_options.lease_ttl_ms);
  HILNAS_ASSIGN_OR_RETURN(std::unique_ptr<WebServer> web,
                          StartWeb(cl, p, campaigns.get(), store.get()));
  runner.Start();  // resumes any campaign that was running when the last process died
  if (!cl.port_file.empty()) {
    HILNAS_RETURN_IF_ERROR(WriteFileAtomically(cl.port_file, absl::StrCat(port, "\n")));
  }
  const int sig = WaitForSignal();
  std::printf("hilnas coordinator: signal %d, shutting down\n", sig);
  runner.Stop();
  web.reset();
  services.Shutdown();
  server->Shutdown(In(2000));
  return absl::OkStatus();
}

int RunCoordinator(const CoordinatorOptions& cl) {
  // Signals are taken by sigwait in Serve; block them before any thread starts.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  absl::StatusOr<Policy> policy = PolicyOf(cl);
  if (!policy.ok()) return Fail(policy.status());
  return ExitCode(Serve(cl, *policy));
}

void AddServingFlags(CLI::App* app, CoordinatorOptions* o) {
  app->add_option("--listen", o->listen, "address to serve gRPC on");
  app->add_option("--db", o->db, "SQLite file holding agents, jobs, campaigns and results");
  app->add_option("--port-file", o->port_file, "write the bound port here once serving");
  app->add_option("--http", o->http,
                  "serve the web page on HOST:PORT too, e.g. 127.0.0.1:8080 (port 0 picks)");
  app->add_option("--http-port-file", o->http_port_file, "write the web page's port here");
  app->add_option("--work-dir", o->work_dir,
                  "campaign trials' pruned checkpoints go here (default DB.work)");
  app->add_option("--lease-ttl-ms", o->lease_ttl_ms,
                  "a lease not renewed for this long expires and its job goes back")
      ->check(CLI::Range(int64_t{100}, int64_t{86'400'000}));
  app->add_option("--heartbeat-ms", o->heartbeat_ms, "heartbeat interval told to agents")
      ->check(CLI::Range(int64_t{10}, int64_t{3'600'000}));
  app->add_option("--max-attempts", o->max_attempts, "lease expiries before a job fails")
      ->check(CLI::Range(1, 100));
  app->add_option("--canary-request", o->canary_request,
                  "the drift-check canary agents re-time: default | none | a BenchmarkRequest "
                  ".textproto");
  app->add_option("--canary-tolerance", o->canary_tolerance,
                  "re-queue a job whose agent's canary ran more than this fraction off its "
                  "baseline, in (0, 10)");
  app->add_option("--max-drift-requeues", o->max_drift_requeues,
                  "drift re-queues per job before its result is kept, marked drifted, 0..100");
}

void AddSecurityFlags(CLI::App* app, CoordinatorOptions* o) {
  app->add_option("--token", o->token, "enrollment token agents present; default $HILNAS_TOKEN");
  app->add_option("--user-token", o->user_token,
                  "the user token accepted (named \"user\"); default $HILNAS_USER_TOKEN");
  app->add_option("--user-tokens-file", o->user_tokens_file,
                  "more user tokens, one \"NAME TOKEN\" per line (NAME goes to the audit log)");
  app->add_option("--tls-cert", o->tls_cert,
                  "serve gRPC and the web page over TLS with this certificate (PEM)");
  app->add_option("--tls-key", o->tls_key, "the private key of --tls-cert (PEM)");
  app->add_option("--tls-client-ca", o->tls_client_ca,
                  "require client certificates signed by this CA (mutual TLS)");
  app->add_flag("--insecure", o->insecure,
                "listen on a non-loopback address without TLS, tokens or data roots");
  app->add_option("--data-root", o->data_roots,
                  "paths in received campaign configs and benchmark requests must lie under this "
                  "folder (repeatable)")
      ->allow_extra_args(false);
  app->add_option("--evaluator", o->evaluators,
                  "NAME=TEMPLATE or NAME=slurm:FILE, a quality evaluator campaigns may name "
                  "(repeatable); the template runs with {checkpoint} and {output} filled in")
      ->allow_extra_args(false);
  app->add_option("--max-queued-jobs", o->max_queued_jobs,
                  "refuse submissions while this many jobs are queued or running")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}));
  app->add_option("--max-campaigns", o->max_campaigns, "refuse to create more campaigns than this")
      ->check(CLI::Range(1, 1'000'000));
  app->add_option("--max-model-mb", o->max_model_mb,
                  "refuse benchmark jobs whose weights + KV cache need more MiB than this")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app->add_option("--max-message-mb", o->max_message_mb, "largest gRPC message accepted, MiB")
      ->check(CLI::Range(1, 1024));
}

}  // namespace

void AddCoordinatorCommand(Cli& cli) {
  auto [app, o] = cli.Add<CoordinatorOptions>(
      "coordinator",
      "[--listen ADDR --db FILE --http ADDR --work-dir DIR --token T --lease-ttl-ms MS\n"
      "    --tls-cert F --tls-key F --tls-client-ca F --user-token T --user-tokens-file F\n"
      "    --data-root DIR... --evaluator NAME=TEMPLATE|NAME=slurm:FILE... --max-queued-jobs N\n"
      "    --insecure]",
      "serve agents, users and campaigns over gRPC (SQLite store), and the web page with --http;\n"
      "off loopback it needs TLS, both tokens and a data root (docs/security.md)",
      RunCoordinator);
  AddServingFlags(app, o);
  AddSecurityFlags(app, o);
}

}  // namespace hilnas::tools
