// The coordinator exposed the way a phone fleet needs it (docs/security.md),
// attacked over loopback: a real `hilnas coordinator` serving gRPC and the
// web page over TLS with an enrollment token and named user tokens, a real
// agent, real CLI processes, gRPC clients with right and wrong credentials,
// and curl for the web page. Certificates are made with openssl when the
// tests start (nothing secret is committed).
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/audit_log.h"
#include "coordinator/job_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/service.grpc.pb.h"
#include "tests/process.h"
#include "tests/tiny_job.h"
#include "util/clock.h"
#include "util/grpc_security.h"
#include "util/subprocess.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::hilnas::testing::Process;
using ::hilnas::testing::WaitFor;
using ::testing::HasSubstr;

constexpr char kEnrollment[] = "enrol-5d1f0a9c2b7e4f11";
constexpr char kAlice[] = "alice-3b9e1c7d0f2a4e68";
constexpr char kBob[] = "bob-8c2d4e6f1a3b5c7d9e";

std::chrono::system_clock::time_point In(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

// A CA, a server certificate for localhost and 127.0.0.1 signed by it, a
// client certificate signed by it, and an unrelated CA.
void MakeCertificates(const std::string& d) {
  const std::string script = absl::StrCat(R"(set -e
cd ')",
                                          d, R"('
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
ca() { key "$1.key"; openssl req -x509 -new -key "$1.key" -out "$1.pem" -days 2 -subj "/CN=$1" 2>/dev/null; }
leaf() {  # name ca subjectAltName
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1" 2>/dev/null
  printf 'subjectAltName=%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA "$2.pem" -CAkey "$2.key" -CAcreateserial -out "$1.pem" \
    -days 2 -extfile "$1.ext" 2>/dev/null
}
ca ca; ca wrong-ca
leaf server ca 'DNS:localhost,IP:127.0.0.1'
leaf phone ca 'DNS:phone'
)");
  absl::StatusOr<std::string> out = RunShellCommand(script, 60);
  ASSERT_TRUE(out.ok()) << out.status();
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hilnas_security_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // Each test its own certificates: ctest runs the tests as parallel processes.
    certs_ = dir_ + "/certs";
    fs::create_directories(certs_);
    MakeCertificates(certs_);
    std::ofstream(dir_ + "/users") << "# name token\nalice " << kAlice << "\nbob " << kBob << "\n";
    // A token file under the data root (any bytes are byte-level tokens).
    std::ofstream tokens(dir_ + "/tokens.bin", std::ios::binary);
    for (int i = 0; i < 50'000; ++i) tokens.put(static_cast<char>('a' + i % 26));
  }

  std::string Cert(const std::string& name) const { return certs_ + "/" + name; }

  // Starts a coordinator with TLS, both tokens and two data roots (the
  // committed backbone's folder and this test's folder).
  std::unique_ptr<Process> StartCoordinator(std::vector<std::string> extra = {}) {
    const std::string port_file = dir_ + "/port", http_file = dir_ + "/http_port";
    std::vector<std::string> args = {"coordinator",
                                     "--listen=127.0.0.1:0",
                                     "--db=" + dir_ + "/coordinator.db",
                                     "--port_file=" + port_file,
                                     "--http=127.0.0.1:0",
                                     "--http_port_file=" + http_file,
                                     "--tls_cert=" + Cert("server.pem"),
                                     "--tls_key=" + Cert("server.key"),
                                     absl::StrCat("--token=", kEnrollment),
                                     "--user_tokens_file=" + dir_ + "/users",
                                     "--data_root=" + std::string(HILNAS_SOURCE_DIR) + "/data",
                                     "--data_root=" + dir_,
                                     "--lease_ttl_ms=1500",
                                     "--heartbeat_ms=300"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto p = std::make_unique<Process>(args, dir_ + "/coordinator.log");
    std::string text, http;
    EXPECT_TRUE(WaitFor(
        [&] {
          return ReadFileToString(port_file, &text).ok() && !text.empty() &&
                 ReadFileToString(http_file, &http).ok() && !http.empty();
        },
        30))
        << p->Log();
    EXPECT_TRUE(absl::SimpleAtoi(text, &port_)) << text;
    EXPECT_TRUE(absl::SimpleAtoi(http, &http_port_)) << http;
    address_ = absl::StrCat("127.0.0.1:", port_);
    return p;
  }

  // A channel to the coordinator with `ca` (empty: plain text) carrying
  // `token` as the bearer token (empty: none).
  std::shared_ptr<grpc::Channel> Channel(const std::string& ca, const std::string& token,
                                         const std::string& client_cert = "") {
    ClientTls tls;
    tls.ca_file = ca;
    if (!client_cert.empty()) {
      tls.cert_file = Cert(client_cert + ".pem");
      tls.key_file = Cert(client_cert + ".key");
    }
    auto md = std::make_shared<CallMetadata>();
    if (!token.empty()) md->Set(kAuthorizationKey, kBearerPrefix + token);
    auto channel = MakeChannel(address_, tls, md);
    EXPECT_TRUE(channel.ok()) << channel.status();
    return *channel;
  }
  std::unique_ptr<UserService::Stub> Users(const std::string& token = kAlice) {
    return UserService::NewStub(Channel(Cert("ca.pem"), token));
  }

  // Runs `hilnas ARGS` to the end; returns its exit code and output.
  std::pair<int, std::string> Cli(std::vector<std::string> args) {
    const std::string log = absl::StrCat(dir_, "/cli-", ++cli_runs_, ".log");
    Process p(args, log);
    const int rc = p.Wait();
    return {rc, p.Log()};
  }

  // A valid campaign config under the data roots, with `evaluator`.
  std::string CampaignFile(const std::string& name, const std::string& evaluator) {
    std::string text;
    EXPECT_TRUE(
        ReadFileToString(std::string(HILNAS_SOURCE_DIR) + "/tests/data/tiny-demo.textproto", &text)
            .ok());
    auto replace = [&](const std::string& from, const std::string& to) {
      ASSERT_NE(text.find(from), std::string::npos) << from;
      text.replace(text.find(from), from.size(), to);
    };
    replace("name: \"tiny-demo\"", absl::StrCat("name: \"", name, "\""));
    replace("backbone_checkpoint: \"data/demo-backbone\"",
            absl::StrCat("backbone_checkpoint: \"", HILNAS_SOURCE_DIR, "/data/demo-backbone\"\n",
                         "tokens: \"", dir_, "/tokens.bin\""));
    replace("quality_evaluator: \"in-process\"", "quality_evaluator: \"" + evaluator + "\"");
    const std::string path = dir_ + "/" + name + ".textproto";
    std::ofstream(path) << text;
    return path;
  }

  std::string Curl(const std::string& args) {
    absl::StatusOr<std::string> out =
        RunShellCommand(absl::StrCat("curl -s -o ", dir_, "/body -w '%{http_code}' --cacert ",
                                     Cert("ca.pem"), " ", args),
                        30);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.value_or("");
  }
  std::string Url(const std::string& path) const {
    return absl::StrCat("https://127.0.0.1:", http_port_, path);
  }
  std::string Body() const {
    std::string b;
    ReadFileToString(dir_ + "/body", &b).IgnoreError();
    return b;
  }

  std::string certs_;
  std::string dir_;
  std::string address_;
  int port_ = 0, http_port_ = 0, cli_runs_ = 0;
};

TEST_F(SecurityTest, TheRightCaConnectsAndTheWrongCaOrPlainTextFailsClearly) {
  auto coordinator = StartCoordinator();
  const std::string coord = "--coordinator=" + address_;
  const std::string user = absl::StrCat("--user_token=", kAlice);
  auto [ok_rc, ok_out] = Cli({"agents", "list", coord, user, "--tls_ca=" + Cert("ca.pem")});
  EXPECT_EQ(ok_rc, 0) << ok_out;
  EXPECT_THAT(ok_out, HasSubstr("0 agents"));

  auto [wrong_rc, wrong_out] =
      Cli({"agents", "list", coord, user, "--tls_ca=" + Cert("wrong-ca.pem")});
  EXPECT_NE(wrong_rc, 0);
  EXPECT_THAT(wrong_out, HasSubstr("certificate verify failed"));
  EXPECT_THAT(wrong_out, HasSubstr("--tls-ca"));

  auto [plain_rc, plain_out] = Cli({"agents", "list", coord, user});
  EXPECT_NE(plain_rc, 0);
  EXPECT_THAT(plain_out, HasSubstr("if the coordinator serves TLS, pass --tls-ca"));

  auto [missing_rc, missing_out] =
      Cli({"agents", "list", coord, user, "--tls_ca=" + dir_ + "/nope.pem"});
  EXPECT_NE(missing_rc, 0);
  EXPECT_THAT(missing_out, HasSubstr("--tls-ca " + dir_ + "/nope.pem: no such file"));

  // The same for a gRPC client of our own: the call fails, nothing answers.
  ListAgentsResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(5000));
  grpc::Status s = UserService::NewStub(Channel(Cert("wrong-ca.pem"), kAlice))
                       ->ListAgents(&ctx, ListAgentsRequest(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(SecurityTest, EveryUserRpcWithoutTheUserTokenIsUnauthenticated) {
  auto coordinator = StartCoordinator();
  for (const std::string& token : {std::string(), std::string(kEnrollment), std::string("guess")}) {
    auto stub = Users(token);
    auto call = [&](auto method, const auto& req, auto* resp) {
      grpc::ClientContext ctx;
      ctx.set_deadline(In(5000));
      return ((*stub).*method)(&ctx, req, resp);
    };
    ListAgentsResponse agents;
    SubmitBenchmarkResponse submitted;
    GetJobResponse job;
    CampaignStatus status;
    ListCampaignsResponse campaigns;
    SubmitBenchmarkRequest submit;
    submit.mutable_request()->set_checkpoint_dir(dir_);
    submit.mutable_request()->add_prompt_lengths(64);
    GetJobRequest get;
    get.set_job_id("1");
    CampaignRequest named;
    named.set_name("c");
    const std::vector<std::pair<const char*, grpc::Status>> answers = {
        {"ListAgents", call(&UserService::Stub::ListAgents, ListAgentsRequest(), &agents)},
        {"SubmitBenchmark", call(&UserService::Stub::SubmitBenchmark, submit, &submitted)},
        {"GetJob", call(&UserService::Stub::GetJob, get, &job)},
        {"CreateCampaign",
         call(&UserService::Stub::CreateCampaign, CreateCampaignRequest(), &status)},
        {"StartCampaign", call(&UserService::Stub::StartCampaign, named, &status)},
        {"GetCampaign", call(&UserService::Stub::GetCampaign, named, &status)},
        {"ListCampaigns", call(&UserService::Stub::ListCampaigns, named, &campaigns)},
        {"StopCampaign", call(&UserService::Stub::StopCampaign, named, &status)},
        {"ResumeCampaign", call(&UserService::Stub::ResumeCampaign, named, &status)}};
    for (const auto& [rpc, s] : answers) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << rpc << " with token \"" << token << "\": " << s.error_message();
    }
  }
  // The CLI says what is missing.
  auto [rc, out] =
      Cli({"agents", "list", "--coordinator=" + address_, "--tls_ca=" + Cert("ca.pem")});
  EXPECT_NE(rc, 0);
  EXPECT_THAT(out, HasSubstr("no user token: pass --user-token"));
}

TEST_F(SecurityTest, ACommandInACampaignConfigIsRefusedAtCreateAndNeverRuns) {
  auto coordinator = StartCoordinator();
  const std::string marker = dir_ + "/pwned";
  const std::string attack = absl::StrCat("sh -c 'id > ", marker, "' {checkpoint} {output}");
  // Through the CLI ...
  auto [rc, out] = Cli({"campaign", "create", "--config=" + CampaignFile("attack", attack),
                        "--coordinator=" + address_, "--tls_ca=" + Cert("ca.pem"),
                        absl::StrCat("--user_token=", kAlice)});
  EXPECT_NE(rc, 0);
  EXPECT_THAT(out, HasSubstr("quality_evaluator"));
  // ... and straight to the coordinator, past any client-side check.
  CampaignConfig config;
  ASSERT_TRUE(ReadTextProtoFile(CampaignFile("attack", "in-process"), &config).ok());
  config.set_quality_evaluator(attack);
  CreateCampaignRequest req;
  *req.mutable_config() = config;
  CampaignStatus status;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(30'000));
  grpc::Status s = Users()->CreateCampaign(&ctx, req, &status);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("quality_evaluator"));
  EXPECT_THAT(s.error_message(), HasSubstr("--evaluator NAME=TEMPLATE"));
  // A path outside the data roots is refused the same way.
  config.set_quality_evaluator("in-process");
  config.set_tokens("/etc/passwd");
  *req.mutable_config() = config;
  grpc::ClientContext ctx3;
  s = Users()->CreateCampaign(&ctx3, req, &status);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("tokens: /etc/passwd"));
  EXPECT_THAT(s.error_message(), HasSubstr("outside the coordinator's data roots"));

  ListCampaignsResponse list;
  grpc::ClientContext ctx4;
  ASSERT_TRUE(Users()->ListCampaigns(&ctx4, CampaignRequest(), &list).ok());
  EXPECT_EQ(list.campaigns_size(), 0);
  EXPECT_FALSE(fs::exists(marker));
}

TEST_F(SecurityTest, AnAgentOverTlsMeasuresAndForgedReportsAreRejectedStoringNothing) {
  auto coordinator = StartCoordinator();
  Process agent({"agent", "--coordinator=" + address_, "--name=phone", "--threads=1",
                 "--cooldown_ms=0", "--max_foreign_cores=0", "--canary=false",
                 "--tls_ca=" + Cert("ca.pem"), absl::StrCat("--token=", kEnrollment)},
                dir_ + "/agent.log");
  auto users = Users();
  auto submit = [&](const std::string& device) {
    SubmitBenchmarkRequest req;
    *req.mutable_request() = ::hilnas::testing::TinyJob();
    req.set_device(device);
    SubmitBenchmarkResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(5000));
    grpc::Status s = users->SubmitBenchmark(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  };
  auto get = [&](const std::string& id) {
    GetJobRequest req;
    req.set_job_id(id);
    req.set_wait_ms(2000);
    GetJobResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(10'000));
    EXPECT_TRUE(users->GetJob(&ctx, req, &resp).ok());
    return resp;
  };
  const std::string measured = submit("");
  ASSERT_TRUE(WaitFor([&] { return get(measured).state() == JOB_DONE; }, 120)) << agent.Log();
  // A job for a device that never comes stays queued: the forger's target.
  const std::string target = submit("nobody");

  ListAgentsResponse listed;
  grpc::ClientContext list_ctx;
  ASSERT_TRUE(users->ListAgents(&list_ctx, ListAgentsRequest(), &listed).ok());
  ASSERT_EQ(listed.agents_size(), 1);
  const std::string listed_id = listed.agents(0).agent_id();
  EXPECT_EQ(listed.agents(0).device().name(), "phone");
  EXPECT_EQ(listed.DebugString().find("session"), std::string::npos);

  // Forgers hold the enrollment token (a phone was lost) and a listed or
  // guessed agent id, but not the agent's session key.
  auto agents = AgentService::NewStub(Channel(Cert("ca.pem"), kEnrollment));
  for (const std::string& id : {listed_id, std::string("agent-0000000000000000")}) {
    for (const std::string& job : {measured, target}) {
      ReportResultRequest forged;
      forged.set_agent_id(id);
      forged.set_job_id(job);
      forged.set_lease_id("lease-guess");
      forged.mutable_result()->add_samples()->set_ttft_ms(0.001);
      ReportResultResponse resp;
      grpc::ClientContext ctx;
      ctx.AddMetadata(kSessionKey, std::string(64, '0'));
      ctx.set_deadline(In(5000));
      grpc::Status s = agents->ReportResult(&ctx, forged, &resp);
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << id << " " << job;
      EXPECT_FALSE(resp.accepted());
    }
    LeaseJobRequest lease;
    lease.set_agent_id(id);
    LeaseJobResponse stolen;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(5000));
    EXPECT_EQ(agents->LeaseJob(&ctx, lease, &stolen).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_FALSE(stolen.has_job());
  }
  // Nothing was stored: checked in the SQLite file itself.
  SystemClock clock;
  auto store = JobStore::Open(dir_ + "/coordinator.db", &clock);
  ASSERT_TRUE(store.ok()) << store.status();
  int64_t measured_id = 0, target_id = 0;
  ASSERT_TRUE(absl::SimpleAtoi(measured, &measured_id));
  ASSERT_TRUE(absl::SimpleAtoi(target, &target_id));
  EXPECT_EQ(*(*store)->AcceptedReports(measured_id), 1);
  EXPECT_EQ(*(*store)->AcceptedReports(target_id), 0);
  auto record = (*store)->GetJob(target_id);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->state, QUEUED);
  EXPECT_FALSE(record->result.has_value());
  auto done = (*store)->GetJob(measured_id);
  ASSERT_TRUE(done.ok() && done->result.has_value());
  EXPECT_GT(done->result->samples(0).ttft_ms(), 0.001);
  agent.Signal(SIGTERM);
  EXPECT_EQ(agent.Wait(), 0) << agent.Log();
}

TEST_F(SecurityTest, MutualTlsAdmitsOnlyClientsWithACertificateFromTheClientCa) {
  auto coordinator = StartCoordinator({"--tls_client_ca=" + Cert("ca.pem")});
  auto try_register = [&](const std::string& client_cert) {
    auto stub = AgentService::NewStub(Channel(Cert("ca.pem"), kEnrollment, client_cert));
    RegisterRequest req;
    req.mutable_device()->set_name("phone");
    RegisterResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(5000));
    return stub->Register(&ctx, req, &resp);
  };
  EXPECT_EQ(try_register("").error_code(), grpc::StatusCode::UNAVAILABLE);
  grpc::Status with_cert = try_register("phone");
  EXPECT_TRUE(with_cert.ok()) << with_cert.error_message();
  // And the agent process with --tls-cert/--tls-key registers and idles.
  Process agent({"agent", "--coordinator=" + address_, "--name=phone-2", "--threads=1",
                 "--tls_ca=" + Cert("ca.pem"), "--tls_cert=" + Cert("phone.pem"),
                 "--tls_key=" + Cert("phone.key"), absl::StrCat("--token=", kEnrollment)},
                dir_ + "/agent.log");
  EXPECT_TRUE(WaitFor([&] { return agent.Log().find("registered with") != std::string::npos; }, 30))
      << agent.Log();
}

TEST_F(SecurityTest, TheWebPageAnswers401WithoutTheTokenAndShowsTheCampaignWithIt) {
  auto coordinator = StartCoordinator();
  auto [rc, out] = Cli({"campaign", "create", "--config=" + CampaignFile("web", "in-process"),
                        "--coordinator=" + address_, "--tls_ca=" + Cert("ca.pem"),
                        absl::StrCat("--user_token=", kBob)});
  ASSERT_EQ(rc, 0) << out;
  const std::vector<std::string> routes = {"/",
                                           "/index.html",
                                           "/api/campaigns",
                                           "/api/campaigns/web",
                                           "/api/campaigns/web/front.svg",
                                           "/api/agents",
                                           "/nonexistent"};
  for (const std::string& r : routes) {
    EXPECT_EQ(Curl(Url(r)), "401") << r;
    EXPECT_EQ(Curl("-H 'Authorization: Bearer guess' " + Url(r)), "401") << r;
    EXPECT_EQ(Body().find("web\""), std::string::npos) << r;
  }
  const std::string bearer = absl::StrCat("-H 'Authorization: Bearer ", kAlice, "' ");
  EXPECT_EQ(Curl(bearer + Url("/api/campaigns")), "200");
  EXPECT_THAT(Body(), HasSubstr("\"name\":\"web\""));
  EXPECT_EQ(Curl(bearer + Url("/api/campaigns/web")), "200");
  EXPECT_THAT(Body(), HasSubstr("\"trials\""));
  EXPECT_EQ(Curl(bearer + Url("/")), "200");
  // Read-only: nothing but the login form takes a POST.
  EXPECT_EQ(Curl(bearer + "-X POST " + Url("/api/campaigns")), "405");
  // The login form sets a cookie that opens the page.
  const std::string jar = dir_ + "/cookies";
  EXPECT_EQ(Curl(absl::StrCat("-c ", jar, " --data-urlencode token=guess ", Url("/login"))), "401");
  EXPECT_EQ(Curl(absl::StrCat("-c ", jar, " --data-urlencode token=", kAlice, " ", Url("/login"))),
            "303");
  std::string cookies;
  ASSERT_TRUE(ReadFileToString(jar, &cookies).ok());
  EXPECT_THAT(cookies, HasSubstr("hilnas_session"));
  EXPECT_EQ(cookies.find(kAlice), std::string::npos);  // the cookie is not the token
  EXPECT_EQ(Curl(absl::StrCat("-b ", jar, " ", Url("/api/campaigns/web"))), "200");
  EXPECT_THAT(Body(), HasSubstr("\"name\":\"web\""));
  // Plain HTTP to the HTTPS port gets nothing.
  absl::StatusOr<std::string> plain = RunShellCommand(
      absl::StrCat("curl -s -m 5 -o /dev/null -w '%{http_code}' http://127.0.0.1:", http_port_,
                   "/ || true"),
      30);
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(*plain, ::testing::AnyOf("000", "400"));
}

TEST_F(SecurityTest, UserActionsAreAuditedWithTheCredentialsName) {
  auto coordinator = StartCoordinator();
  const std::string config = CampaignFile("audited", "in-process");
  const std::vector<std::string> common = {"--coordinator=" + address_,
                                           "--tls_ca=" + Cert("ca.pem")};
  auto run = [&](std::vector<std::string> args, const char* token) {
    args.insert(args.end(), common.begin(), common.end());
    args.push_back(absl::StrCat("--user_token=", token));
    auto [rc, out] = Cli(args);
    EXPECT_EQ(rc, 0) << out;
  };
  run({"campaign", "create", "--config=" + config}, kAlice);
  run({"campaign", "start", "audited"}, kBob);
  run({"campaign", "stop", "audited"}, kAlice);
  SystemClock clock;
  auto audit = AuditLog::Open(dir_ + "/coordinator.db", &clock);
  ASSERT_TRUE(audit.ok()) << audit.status();
  auto log = (*audit)->Newest(10);
  ASSERT_TRUE(log.ok()) << log.status();
  std::vector<std::string> seen;
  for (const AuditEntry& e : *log) {
    seen.push_back(absl::StrCat(e.credential, " ", e.action, " ", e.target, " ", e.outcome));
    EXPECT_GT(e.time_ms, 0);
  }
  EXPECT_THAT(seen, ::testing::ElementsAre("alice create campaign audited ok",
                                           "bob start campaign audited ok",
                                           "alice stop campaign audited ok"));
  // `hilnas audit` shows the same from the file.
  auto [rc, out] = Cli({"audit", "--db=" + dir_ + "/coordinator.db"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("bob"));
  EXPECT_THAT(out, HasSubstr("start"));
  EXPECT_THAT(out, HasSubstr("3 entries"));
}

TEST_F(SecurityTest, AnExposedCoordinatorWithoutCredentialsRefusesToStartAndSaysWhy) {
  auto [rc, out] = Cli({"coordinator", "--listen=0.0.0.0:0", "--db=" + dir_ + "/open.db"});
  EXPECT_NE(rc, 0);
  EXPECT_THAT(out, HasSubstr("refusing to listen on 0.0.0.0:0"));
  for (const char* flag : {"--tls-cert", "--token", "--user-token", "--data-root", "--insecure"}) {
    EXPECT_THAT(out, HasSubstr(flag));
  }
  // --insecure is the operator's explicit choice.
  const std::string port_file = dir_ + "/insecure-port";
  Process open({"coordinator", "--listen=0.0.0.0:0", "--db=" + dir_ + "/open.db", "--insecure",
                "--port_file=" + port_file},
               dir_ + "/insecure.log");
  std::string port;
  EXPECT_TRUE(WaitFor([&] { return ReadFileToString(port_file, &port).ok() && !port.empty(); }, 30))
      << open.Log();
}

}  // namespace
}  // namespace hilnas
