// Load on the real coordinator: `hilnas coordinator` as a child process,
// driven over loopback by N simulated agents (gRPC clients in this process,
// each on its own connection, no models) through J short jobs, with a
// fraction of the agents vanishing mid-lease (they lease a job and are never
// heard from again, so their leases must expire and the jobs go to others).
//
// Two runs in one invocation, the same workload each:
//   secure:    TLS, enrollment token, user token, per-agent session keys
//   reference: plain text, no tokens (a loopback-only coordinator)
// and every figure of the secure run is also given as a ratio to the
// reference, since these machines are shared and noisy.
//
// Checked in each run's SQLite file: every job DONE, exactly one accepted
// report per job. Prints throughput (jobs/s), p50/p99 of LeaseJob,
// ReportResult and SubmitBenchmark, the coordinator's peak RSS (VmHWM).
//
//   build/bench/coordinator_load [--agents 200] [--jobs 10000] [--vanish 0.1]
//                                [--out bench/data/coordinator-load.md]
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "proto/service.grpc.pb.h"
#include "util/grpc_security.h"
#include "util/secrets.h"
#include "util/subprocess.h"
#include "util/textproto.h"

namespace hilnas::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Settings {
  int agents = 200;
  int jobs = 10'000;
  double vanish = 0.1;
  std::string dir;
};

struct RunResult {
  std::string name;
  double seconds = 0;
  double jobs_per_s = 0;
  std::vector<double> lease_ms, report_ms, submit_ms;  // every call's latency
  int64_t peak_rss_kib = 0;
  int64_t done = 0, multiply_reported = 0, expired_leases = 0;
  int vanished = 0;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5));
  return v[i];
}

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

std::chrono::system_clock::time_point In(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

void MakeCertificates(const std::string& d) {
  absl::StatusOr<std::string> out = RunShellCommand(absl::StrCat(R"(set -e
cd ')",
                                                                 d, R"('
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out ca.key 2>/dev/null
openssl req -x509 -new -key ca.key -out ca.pem -days 2 -subj /CN=load-ca 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out server.key 2>/dev/null
openssl req -new -key server.key -out server.csr -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
  -days 2 -extfile server.ext 2>/dev/null
)"),
                                                    60);
  if (!out.ok()) Die(out.status());
}

int64_t PeakRssKib(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) {
      int64_t kib = 0;
      std::istringstream(line.substr(6)) >> kib;
      return kib;
    }
  }
  return 0;
}

int64_t Count(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = nullptr;
  int64_t n = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, nullptr) == SQLITE_OK &&
      sqlite3_step(st) == SQLITE_ROW) {
    n = sqlite3_column_int64(st, 0);
  }
  sqlite3_finalize(st);
  return n;
}

// A job's request: a checkpoint folder (never opened: no agent here runs
// models) and one prompt length.
SubmitBenchmarkRequest Job() {
  SubmitBenchmarkRequest req;
  req.mutable_request()->set_checkpoint_dir("/load/ckpt");
  req.mutable_request()->add_prompt_lengths(64);
  return req;
}

BenchmarkResult Result(const BenchmarkRequest& request, const std::string& agent) {
  BenchmarkResult r;
  *r.mutable_request() = request;
  r.mutable_device()->set_name(agent);
  LatencySample* s = r.add_samples();
  s->set_prompt_tokens(64);
  s->set_ttft_ms(12.5);
  s->set_decode_ms_per_token(1.5);
  LatencySummary* m = r.add_summaries();
  m->set_prompt_tokens(64);
  m->set_ttft_median_ms(12.5);
  m->set_decode_median_ms_per_token(1.5);
  return r;
}

// Starts a coordinator for one run in `dir`; its pid and address. A
// secure run gets TLS (certificates in s.dir), an enrollment and a user token.
pid_t StartCoordinator(const Settings& s, bool secure, const std::string& dir,
                       const std::string& enrollment, const std::string& user, ClientTls* tls,
                       std::string* address) {
  std::vector<std::string> args = {"coordinator",
                                   "--listen=127.0.0.1:0",
                                   "--db=" + dir + "/load.db",
                                   "--port_file=" + dir + "/port",
                                   "--lease_ttl_ms=2000",
                                   "--heartbeat_ms=1000",
                                   absl::StrCat("--max_queued_jobs=", s.jobs + 1)};
  if (secure) {
    MakeCertificates(s.dir);
    args.push_back("--tls_cert=" + s.dir + "/server.pem");
    args.push_back("--tls_key=" + s.dir + "/server.key");
    args.push_back("--token=" + enrollment);
    args.push_back("--user_token=" + user);
    tls->ca_file = s.dir + "/ca.pem";
  }
  const pid_t coordinator = SpawnProcess(std::string(HILNAS_BINARY_DIR) + "/tools/hilnas", args,
                                         dir + "/coordinator.log", false);
  std::string port;
  for (int i = 0; i < 600 && port.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ReadFileToString(dir + "/port", &port).IgnoreError();
  }
  if (port.empty()) Die(absl::UnavailableError("the coordinator did not start; see " + dir));
  *address = "127.0.0.1:" + std::string(absl::StripAsciiWhitespace(port));
  return coordinator;
}

// What the submitter and the agents of one run share.
struct LoadRun {
  const Settings& s;
  std::function<std::shared_ptr<grpc::Channel>(const std::string& token)> channel;
  std::string enrollment;
  std::mutex mu;  // guards out's latency vectors
  RunResult& out;
  std::atomic<int64_t> reported{0};
  std::atomic<bool> finished{false};
  std::atomic<int> vanished{0};
};

// Agent `k`: registers, then leases and reports until every job is
// reported; a vanishing agent disappears holding its `vanish_at`th lease.
void AgentLoop(LoadRun& run, int k, int vanish_at) {
  auto stub = AgentService::NewStub(run.channel(run.enrollment));
  const std::string name = absl::StrCat("load-", k);
  RegisterRequest reg;
  reg.mutable_device()->set_name(name);
  RegisterResponse session;
  grpc::ClientContext rctx;
  rctx.set_deadline(In(60'000));
  grpc::Status st = stub->Register(&rctx, reg, &session);
  if (!st.ok()) Die(absl::InternalError(name + ": register: " + st.error_message()));
  auto authorize = [&](grpc::ClientContext& ctx) {
    ctx.AddMetadata(kSessionKey, session.session_key());
  };
  std::vector<double> lease_ms, report_ms;
  int leases = 0;
  while (!run.finished.load()) {
    LeaseJobRequest lr;
    lr.set_agent_id(session.agent_id());
    lr.set_wait_ms(1000);
    LeaseJobResponse lease;
    grpc::ClientContext lctx;
    authorize(lctx);
    lctx.set_deadline(In(30'000));
    auto a = Clock::now();
    st = stub->LeaseJob(&lctx, lr, &lease);
    lease_ms.push_back(Ms(a, Clock::now()));
    if (!st.ok()) Die(absl::InternalError(name + ": lease: " + st.error_message()));
    if (!lease.has_job()) continue;
    if (++leases == vanish_at) {
      ++run.vanished;
      break;  // gone mid-lease: no report, no heartbeat
    }
    ReportResultRequest rep;
    rep.set_agent_id(session.agent_id());
    rep.set_job_id(lease.job_id());
    rep.set_lease_id(lease.lease_id());
    *rep.mutable_result() = Result(lease.request(), name);
    ReportResultResponse accepted;
    grpc::ClientContext pctx;
    authorize(pctx);
    pctx.set_deadline(In(30'000));
    a = Clock::now();
    st = stub->ReportResult(&pctx, rep, &accepted);
    report_ms.push_back(Ms(a, Clock::now()));
    if (!st.ok()) Die(absl::InternalError(name + ": report: " + st.error_message()));
    if (++run.reported == run.s.jobs) run.finished = true;
  }
  std::lock_guard<std::mutex> lock(run.mu);
  run.out.lease_ms.insert(run.out.lease_ms.end(), lease_ms.begin(), lease_ms.end());
  run.out.report_ms.insert(run.out.report_ms.end(), report_ms.begin(), report_ms.end());
}

// What the database holds after the run: jobs done, jobs not reported
// exactly once, expired leases.
void CountOutcome(const std::string& path, RunResult& out) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    Die(absl::InternalError("cannot open " + path));
  }
  out.done = Count(db, "SELECT COUNT(*) FROM jobs WHERE state = 3");  // JOB_DONE
  out.multiply_reported = Count(
      db,
      "SELECT COUNT(*) FROM jobs j WHERE (SELECT COUNT(*) FROM leases l WHERE l.job_id = j.job_id "
      "AND l.state = 'reported') != 1");
  out.expired_leases = Count(db, "SELECT COUNT(*) FROM leases WHERE state = 'expired'");
  sqlite3_close(db);
}

RunResult Run(const Settings& s, bool secure) {
  RunResult out;
  out.name = secure ? "secure (TLS, tokens, session keys)" : "reference (plain text, no tokens)";
  const std::string dir = absl::StrCat(s.dir, secure ? "/secure" : "/plain");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string enrollment = RandomHex(16), user = RandomHex(16);
  ClientTls tls;
  std::string address;
  const pid_t coordinator = StartCoordinator(s, secure, dir, enrollment, user, &tls, &address);
  LoadRun run{s, nullptr, enrollment, {}, out};
  run.channel = [&](const std::string& token) {
    auto md = std::make_shared<CallMetadata>();
    if (secure) md->Set(kAuthorizationKey, kBearerPrefix + token);
    grpc::ChannelArguments a;
    a.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // its own connection, as a phone has
    auto c = MakeChannel(address, tls, md, a);
    if (!c.ok()) Die(c.status());
    return *c;
  };
  const auto t0 = Clock::now();
  std::thread submitter([&] {
    auto users = UserService::NewStub(run.channel(user));
    std::vector<double> local;
    for (int i = 0; i < s.jobs; ++i) {
      SubmitBenchmarkResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(In(30'000));
      const auto a = Clock::now();
      grpc::Status st = users->SubmitBenchmark(&ctx, Job(), &resp);
      local.push_back(Ms(a, Clock::now()));
      if (!st.ok()) Die(absl::InternalError("submit: " + st.error_message()));
    }
    std::lock_guard<std::mutex> lock(run.mu);
    out.submit_ms = std::move(local);
  });
  // Vanishing agents disappear holding their 2nd, 3rd, ... lease,
  // staggered so the expiries spread over the run.
  const int vanishing = static_cast<int>(s.agents * s.vanish + 0.5);
  std::vector<std::thread> agents;
  for (int k = 0; k < s.agents; ++k) {
    agents.emplace_back(
        [&run, k, vanishing] { AgentLoop(run, k, k < vanishing ? 2 + k % 5 : -1); });
  }
  // Progress, every 5 s; a run that cannot finish (a job failed after
  // max_attempts expiries) ends after 20 minutes and fails the check.
  auto last = Clock::now();
  while (!run.finished.load()) {
    if (Clock::now() - t0 > std::chrono::minutes(20)) run.finished = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (Clock::now() - last > std::chrono::seconds(5)) {
      last = Clock::now();
      std::fprintf(stderr, "  %s: %lld / %d jobs reported, %d agents vanished, %.0f s\n",
                   secure ? "secure" : "reference", static_cast<long long>(run.reported.load()),
                   s.jobs, run.vanished.load(), Ms(t0, last) / 1000);
    }
  }
  out.seconds = Ms(t0, Clock::now()) / 1000;
  out.jobs_per_s = s.jobs / out.seconds;
  submitter.join();
  for (std::thread& t : agents) t.join();
  out.vanished = run.vanished.load();
  out.peak_rss_kib = PeakRssKib(coordinator);
  kill(coordinator, SIGTERM);
  waitpid(coordinator, nullptr, 0);
  CountOutcome(dir + "/load.db", out);
  return out;
}

std::string Report(const Settings& s, const RunResult& secure, const RunResult& ref) {
  std::string md = absl::StrFormat(
      "| run | jobs/s | LeaseJob p50 / p99 ms | ReportResult p50 / p99 ms | SubmitBenchmark "
      "p50 / p99 ms | coordinator peak RSS MiB | agents vanished | expired leases | jobs DONE | "
      "jobs without exactly one report |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const RunResult* r : {&secure, &ref}) {
    absl::StrAppendFormat(
        &md,
        "| %s | %.0f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.0f | %d | %lld | %lld | %lld "
        "|\n",
        r->name, r->jobs_per_s, Percentile(r->lease_ms, 0.5), Percentile(r->lease_ms, 0.99),
        Percentile(r->report_ms, 0.5), Percentile(r->report_ms, 0.99),
        Percentile(r->submit_ms, 0.5), Percentile(r->submit_ms, 0.99), r->peak_rss_kib / 1024.0,
        r->vanished, static_cast<long long>(r->expired_leases), static_cast<long long>(r->done),
        static_cast<long long>(r->multiply_reported));
  }
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0; };
  absl::StrAppendFormat(
      &md,
      "| secure / reference | %.2f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.2f | | | | |\n",
      ratio(secure.jobs_per_s, ref.jobs_per_s),
      ratio(Percentile(secure.lease_ms, 0.5), Percentile(ref.lease_ms, 0.5)),
      ratio(Percentile(secure.lease_ms, 0.99), Percentile(ref.lease_ms, 0.99)),
      ratio(Percentile(secure.report_ms, 0.5), Percentile(ref.report_ms, 0.5)),
      ratio(Percentile(secure.report_ms, 0.99), Percentile(ref.report_ms, 0.99)),
      ratio(Percentile(secure.submit_ms, 0.5), Percentile(ref.submit_ms, 0.5)),
      ratio(Percentile(secure.submit_ms, 0.99), Percentile(ref.submit_ms, 0.99)),
      ratio(secure.peak_rss_kib, ref.peak_rss_kib));
  absl::StrAppendFormat(&md,
                        "\n%d simulated agents, %d jobs, %.0f%% of the agents vanish mid-lease; "
                        "lease TTL 2 s; LeaseJob long-polls up to 1 s (an empty poll is counted "
                        "too).\n",
                        s.agents, s.jobs, 100 * s.vanish);
  return md;
}

}  // namespace
}  // namespace hilnas::bench

int main(int argc, char** argv) {
  using namespace hilnas::bench;
  Settings s;
  if (!absl::SimpleAtoi(Arg(argc, argv, "--agents", "200"), &s.agents) ||
      !absl::SimpleAtoi(Arg(argc, argv, "--jobs", "10000"), &s.jobs) ||
      !absl::SimpleAtod(Arg(argc, argv, "--vanish", "0.1"), &s.vanish) || s.agents < 1 ||
      s.jobs < 1 || s.vanish < 0 || s.vanish >= 1) {
    std::fprintf(stderr,
                 "usage: coordinator_load [--agents N] [--jobs N] [--vanish F<1] [--out FILE]\n");
    return 2;
  }
  s.dir = hilnas::bench::Arg(argc, argv, "--dir", "/tmp/hilnas-coordinator-load");
  std::filesystem::create_directories(s.dir);
  std::fprintf(stderr, "coordinator_load: %d agents, %d jobs, %.0f%% vanish\n", s.agents, s.jobs,
               100 * s.vanish);
  const RunResult secure = Run(s, /*secure=*/true);
  const RunResult ref = Run(s, /*secure=*/false);
  const std::string md = Report(s, secure, ref);
  std::printf("%s", md.c_str());
  const bool exact = secure.done == s.jobs && ref.done == s.jobs && secure.multiply_reported == 0 &&
                     ref.multiply_reported == 0;
  if (const std::string out = Arg(argc, argv, "--out", ""); !out.empty()) {
    std::ofstream(out) << "# Coordinator under load\n\n`build/bench/coordinator_load --agents "
                       << s.agents << " --jobs " << s.jobs << " --vanish " << s.vanish << " --out "
                       << out << "`\n\n"
                       << md;
  }
  if (!exact) std::fprintf(stderr, "FAILED: not every job was done exactly once\n");
  return exact ? 0 : 1;
}
