// The benchmark service and its long polls over in-process gRPC: a real
// server (no port), a real SQLite job store, real client stubs.
#include "coordinator/benchmark_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <map>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "search_space/arch.h"
#include "search_space/shapes.h"
#include "util/grpc_security.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::testing::HasSubstr;

constexpr char kUserToken[] = "alice-token-0123456789abcdef";

class BenchmarkServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string db = ::testing::TempDir() + "/" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    std::filesystem::remove(db);
    auto store = JobStore::Open(db, &clock_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    auto audit = AuditLog::Open(db, &clock_);
    ASSERT_TRUE(audit.ok()) << audit.status();
    audit_ = *std::move(audit);
    BenchmarkServiceOptions o;
    o.enrollment_token = "enrol";
    o.user_tokens = {{"alice", kUserToken}};
    o.audit = audit_.get();
    o.max_unfinished_jobs = 3;
    o.max_model_bytes = int64_t{1} << 30;
    auto roots = DataRoots::Make({::testing::TempDir()});
    ASSERT_TRUE(roots.ok()) << roots.status();
    o.data_roots = *roots;
    o.tick_ms = 10;
    o.max_wait_ms = 5'000;
    services_ = std::make_unique<BenchmarkServices>(store_.get(), &clock_, o);
    grpc::ServerBuilder builder;
    builder.RegisterService(services_->agent_service());
    builder.RegisterService(services_->user_service());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    auto channel = server_->InProcessChannel(grpc::ChannelArguments());
    agents_ = AgentService::NewStub(channel);
    users_ = UserService::NewStub(channel);
  }
  void TearDown() override {
    services_->Shutdown();
    server_->Shutdown();
  }

  // The token and, for a registered agent, its session key.
  void AsAgent(grpc::ClientContext& ctx, const std::string& agent,
               const std::string& token = "enrol") {
    ctx.AddMetadata(kAuthorizationKey, std::string(kBearerPrefix) + token);
    if (sessions_.count(agent)) ctx.AddMetadata(kSessionKey, sessions_[agent]);
  }
  static void AsUser(grpc::ClientContext& ctx) {
    ctx.AddMetadata(kAuthorizationKey, std::string(kBearerPrefix) + kUserToken);
  }
  std::string Register(const std::string& name, const std::string& token = "enrol") {
    RegisterRequest req;
    req.mutable_device()->set_name(name);
    RegisterResponse resp;
    grpc::ClientContext ctx;
    AsAgent(ctx, "", token);
    last_ = agents_->Register(&ctx, req, &resp);
    if (last_.ok()) sessions_[resp.agent_id()] = resp.session_key();
    return resp.agent_id();
  }
  std::string Submit(const std::string& checkpoint = "") {
    SubmitBenchmarkRequest req;
    req.mutable_request()->set_checkpoint_dir(checkpoint.empty() ? ::testing::TempDir() + "/ckpt"
                                                                 : checkpoint);
    req.mutable_request()->add_prompt_lengths(64);
    SubmitBenchmarkResponse resp;
    grpc::ClientContext ctx;
    AsUser(ctx);
    last_ = users_->SubmitBenchmark(&ctx, req, &resp);
    return resp.job_id();
  }
  LeaseJobResponse Lease(const std::string& agent, int64_t wait_ms) {
    LeaseJobRequest req;
    req.set_agent_id(agent);
    req.set_wait_ms(wait_ms);
    LeaseJobResponse resp;
    grpc::ClientContext ctx;
    AsAgent(ctx, agent);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status s = agents_->LeaseJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }
  std::pair<grpc::Status, GetJobResponse> GetJob(const std::string& job, int64_t wait_ms) {
    GetJobRequest req;
    req.set_job_id(job);
    req.set_wait_ms(wait_ms);
    GetJobResponse resp;
    grpc::ClientContext ctx;
    AsUser(ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status s = users_->GetJob(&ctx, req, &resp);
    return {s, resp};
  }

  SystemClock clock_;
  std::unique_ptr<JobStore> store_;
  std::unique_ptr<AuditLog> audit_;
  std::map<std::string, std::string> sessions_;  // agent id -> session key
  std::unique_ptr<BenchmarkServices> services_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<AgentService::Stub> agents_;
  std::unique_ptr<UserService::Stub> users_;
  grpc::Status last_;
};

TEST_F(BenchmarkServiceTest, WrongEnrollmentTokenIsUnauthenticated) {
  Register("phone", "guess");
  EXPECT_EQ(last_.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_THAT(last_.error_message(), HasSubstr("\"phone\": enrollment token rejected"));
}

TEST_F(BenchmarkServiceTest, ParkedLeaseIsAnsweredWhenAJobIsQueued) {
  const std::string agent = Register("a1");
  ASSERT_TRUE(last_.ok()) << last_.error_message();
  LeaseJobResponse leased;
  std::thread waiter([&] { leased = Lease(agent, 20'000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // let it park
  const std::string job = Submit();
  ASSERT_TRUE(last_.ok()) << last_.error_message();
  waiter.join();
  EXPECT_TRUE(leased.has_job());
  EXPECT_EQ(leased.job_id(), job);
  EXPECT_FALSE(leased.lease_id().empty());
}

TEST_F(BenchmarkServiceTest, ParkedLeaseWithNothingQueuedEndsWithoutAJobAtItsDeadline) {
  const std::string agent = Register("a1");
  const auto t0 = std::chrono::steady_clock::now();
  LeaseJobResponse resp = Lease(agent, 150);
  EXPECT_FALSE(resp.has_job());
  // Deadlines are whole milliseconds of the system clock: up to 1 ms early.
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(149));
}

TEST_F(BenchmarkServiceTest, ParkedGetJobReturnsOnceTheJobIsReported) {
  const std::string agent = Register("a1");
  const std::string job = Submit();
  LeaseJobResponse lease = Lease(agent, 0);
  ASSERT_TRUE(lease.has_job());
  std::pair<grpc::Status, GetJobResponse> got;
  std::thread waiter([&] { got = GetJob(job, 20'000); });
  ReportResultRequest report;
  report.set_agent_id(agent);
  report.set_job_id(job);
  report.set_lease_id(lease.lease_id());
  report.mutable_result()->add_samples()->set_ttft_ms(7);
  ReportResultResponse accepted;
  grpc::ClientContext ctx;
  AsAgent(ctx, agent);
  ASSERT_TRUE(agents_->ReportResult(&ctx, report, &accepted).ok());
  waiter.join();
  ASSERT_TRUE(got.first.ok()) << got.first.error_message();
  EXPECT_EQ(got.second.state(), JOB_DONE);
  EXPECT_EQ(got.second.result().samples(0).ttft_ms(), 7);
}

TEST_F(BenchmarkServiceTest, ShutdownFinishesEveryParkedCall) {
  const std::string agent = Register("a1");
  const std::string job = Submit();
  ASSERT_TRUE(Lease(agent, 0).has_job());
  const std::string other = Register("a2");
  LeaseJobResponse idle;
  std::pair<grpc::Status, GetJobResponse> got;
  std::thread lease_waiter([&] { idle = Lease(other, 20'000); });
  std::thread job_waiter([&] { got = GetJob(job, 20'000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  services_->Shutdown();
  lease_waiter.join();
  job_waiter.join();
  EXPECT_FALSE(idle.has_job());
  EXPECT_EQ(got.first.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(got.first.error_message(), HasSubstr("shutting down"));
}

TEST_F(BenchmarkServiceTest, GetJobOfAnUnknownOrMalformedIdNamesIt) {
  auto [s, resp] = GetJob("x7", 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("job id \"x7\" is not a positive integer"));
  std::tie(s, resp) = GetJob("99", 0);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(BenchmarkServiceTest, EveryUserCallWithoutTheUserTokenIsUnauthenticated) {
  for (const std::string token : {"", "guess", "enrol"}) {
    auto call = [&](auto method, const auto& req, auto* resp) {
      grpc::ClientContext ctx;
      if (!token.empty()) ctx.AddMetadata(kAuthorizationKey, std::string(kBearerPrefix) + token);
      return ((*users_).*method)(&ctx, req, resp);
    };
    ListAgentsResponse agents;
    SubmitBenchmarkResponse submitted;
    GetJobResponse job;
    CampaignStatus status;
    ListCampaignsResponse campaigns;
    SubmitBenchmarkRequest submit;
    submit.mutable_request()->set_checkpoint_dir(::testing::TempDir());
    submit.mutable_request()->add_prompt_lengths(64);
    GetJobRequest get;
    get.set_job_id("1");
    CampaignRequest named;
    named.set_name("c");
    const std::vector<grpc::Status> answers = {
        call(&UserService::Stub::ListAgents, ListAgentsRequest(), &agents),
        call(&UserService::Stub::SubmitBenchmark, submit, &submitted),
        call(&UserService::Stub::GetJob, get, &job),
        call(&UserService::Stub::CreateCampaign, CreateCampaignRequest(), &status),
        call(&UserService::Stub::StartCampaign, named, &status),
        call(&UserService::Stub::GetCampaign, named, &status),
        call(&UserService::Stub::ListCampaigns, named, &campaigns),
        call(&UserService::Stub::StopCampaign, named, &status),
        call(&UserService::Stub::ResumeCampaign, named, &status)};
    for (size_t i = 0; i < answers.size(); ++i) {
      EXPECT_EQ(answers[i].error_code(), grpc::StatusCode::UNAUTHENTICATED)
          << "call " << i << " with token \"" << token << "\"";
    }
  }
  ASSERT_OK_AND_ASSIGN(int64_t queued, store_->UnfinishedJobs());
  EXPECT_EQ(queued, 0);
}

TEST_F(BenchmarkServiceTest, AListedAgentIdWithoutItsSessionKeyCannotLeaseOrReport) {
  const std::string agent = Register("phone");
  const std::string job = Submit();
  LeaseJobResponse lease = Lease(agent, 0);
  ASSERT_TRUE(lease.has_job());
  // An attacker holding the enrollment token and the id ListAgents shows.
  ListAgentsResponse listed;
  {
    grpc::ClientContext ctx;
    AsUser(ctx);
    ASSERT_TRUE(users_->ListAgents(&ctx, ListAgentsRequest(), &listed).ok());
  }
  ASSERT_EQ(listed.agents_size(), 1);
  EXPECT_EQ(listed.agents(0).agent_id(), agent);
  ReportResultRequest forged;
  forged.set_agent_id(listed.agents(0).agent_id());
  forged.set_job_id(job);
  forged.set_lease_id(lease.lease_id());
  forged.mutable_result()->add_samples()->set_ttft_ms(0.001);
  for (const std::string& key : std::vector<std::string>{"", "0000", std::string(64, 'a')}) {
    grpc::ClientContext ctx;
    ctx.AddMetadata(kAuthorizationKey, "Bearer enrol");
    if (!key.empty()) ctx.AddMetadata(kSessionKey, key);
    ReportResultResponse resp;
    grpc::Status s = agents_->ReportResult(&ctx, forged, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << key;
    LeaseJobRequest lease_req;
    lease_req.set_agent_id(agent);
    LeaseJobResponse stolen;
    grpc::ClientContext lease_ctx;
    lease_ctx.AddMetadata(kAuthorizationKey, "Bearer enrol");
    if (!key.empty()) lease_ctx.AddMetadata(kSessionKey, key);
    EXPECT_EQ(agents_->LeaseJob(&lease_ctx, lease_req, &stolen).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_FALSE(stolen.has_job());
  }
  ASSERT_OK_AND_ASSIGN(JobRecord j, store_->GetJob(std::stoll(job)));
  EXPECT_EQ(j.state, LEASED);
  EXPECT_FALSE(j.result.has_value());
  ASSERT_OK_AND_ASSIGN(int reports, store_->AcceptedReports(std::stoll(job)));
  EXPECT_EQ(reports, 0);
}

TEST_F(BenchmarkServiceTest, SubmissionsAreAuditedWithTheCredentialsName) {
  const std::string job = Submit();
  ASSERT_TRUE(last_.ok()) << last_.error_message();
  Submit("/etc");  // outside the data roots: refused, and recorded as refused
  EXPECT_EQ(last_.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(last_.error_message(), HasSubstr("checkpoint_dir: /etc"));
  ASSERT_OK_AND_ASSIGN(std::vector<AuditEntry> log, audit_->Newest(10));
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].credential, "alice");
  EXPECT_EQ(log[0].action, "submit");
  EXPECT_EQ(log[0].target, "job " + job);
  EXPECT_EQ(log[0].outcome, "ok");
  EXPECT_THAT(log[1].outcome, HasSubstr("outside"));
  EXPECT_GT(log[0].time_ms, 0);
}

TEST_F(BenchmarkServiceTest, SubmissionLimitsRefuseBeforeAnythingIsQueued) {
  for (int i = 0; i < 3; ++i) {
    Submit();
    ASSERT_TRUE(last_.ok()) << last_.error_message();
  }
  Submit();
  EXPECT_EQ(last_.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(last_.error_message(), HasSubstr("--max-queued-jobs"));

  // 1.4B parameters need ~5.6 GiB in fp32: over this coordinator's 1 GiB.
  SubmitBenchmarkRequest big;
  ASSERT_OK_AND_ASSIGN(Shape shape, FindShape("mobilellm-flash-1.4b"));
  *big.mutable_request()->mutable_arch() = ArchToProto(shape.arch);
  big.mutable_request()->add_prompt_lengths(64);
  SubmitBenchmarkResponse resp;
  grpc::ClientContext ctx;
  AsUser(ctx);
  grpc::Status s = users_->SubmitBenchmark(&ctx, big, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("--max-model-mb"));
  ASSERT_OK_AND_ASSIGN(int64_t queued, store_->UnfinishedJobs());
  EXPECT_EQ(queued, 3);
}

}  // namespace
}  // namespace hilnas
