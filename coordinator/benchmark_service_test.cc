// The benchmark service and its long polls over in-process gRPC: a real
// server (no port), a real SQLite job store, real client stubs.
#include "coordinator/benchmark_service.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hilnas {
namespace {

using ::testing::HasSubstr;

class BenchmarkServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string db = ::testing::TempDir() + "/" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    std::filesystem::remove(db);
    auto store = JobStore::Open(db, &clock_);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    BenchmarkServiceOptions o;
    o.enrollment_token = "enrol";
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

  std::string Register(const std::string& name, const std::string& token = "enrol") {
    RegisterRequest req;
    req.mutable_device()->set_name(name);
    req.set_enrollment_token(token);
    RegisterResponse resp;
    grpc::ClientContext ctx;
    last_ = agents_->Register(&ctx, req, &resp);
    return resp.agent_id();
  }
  std::string Submit() {
    SubmitBenchmarkRequest req;
    req.mutable_request()->set_checkpoint_dir("/ckpt");
    req.mutable_request()->add_prompt_lengths(64);
    SubmitBenchmarkResponse resp;
    grpc::ClientContext ctx;
    last_ = users_->SubmitBenchmark(&ctx, req, &resp);
    return resp.job_id();
  }
  LeaseJobResponse Lease(const std::string& agent, int64_t wait_ms) {
    LeaseJobRequest req;
    req.set_agent_id(agent);
    req.set_wait_ms(wait_ms);
    LeaseJobResponse resp;
    grpc::ClientContext ctx;
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
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::Status s = users_->GetJob(&ctx, req, &resp);
    return {s, resp};
  }

  SystemClock clock_;
  std::unique_ptr<JobStore> store_;
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
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(150));
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

}  // namespace
}  // namespace hilnas
