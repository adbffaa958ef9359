// The agent's loop against a scripted coordinator over in-process gRPC
// (the channel is injected through AgentOptions::channel): registration,
// long-poll leasing, heartbeats, reports, re-registration and token
// rejection. The runtime is a fake that times nothing.
#include "device_agent/agent.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/service.grpc.pb.h"
#include "util/grpc_security.h"

namespace hilnas {
namespace {

using ::testing::HasSubstr;

class FakeModel : public PreparedModel {
 public:
  explicit FakeModel(int sleep_ms) : sleep_ms_(sleep_ms) {}
  absl::StatusOr<RunTiming> Run(int prompt_tokens, int decode_tokens) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    RunTiming t;
    t.ttft_ms = prompt_tokens / 10.0;
    t.decode_ms_per_token = 1.5;
    t.decode_tokens = decode_tokens;
    return t;
  }

 private:
  int sleep_ms_;
};

class FakeRuntime : public Runtime {
 public:
  explicit FakeRuntime(int sleep_ms = 0) : sleep_ms_(sleep_ms) {}
  std::string name() const override { return "fake"; }
  std::string version() const override { return "1"; }
  absl::StatusOr<std::unique_ptr<PreparedModel>> Prepare(const BenchmarkRequest&) override {
    return std::make_unique<FakeModel>(sleep_ms_);
  }

 private:
  int sleep_ms_;
};

// The agent's data root in these tests.
std::string RootDir() { return ::testing::TempDir() + "/agent_test_root"; }

// A coordinator that hands out `jobs` jobs and records what agents send.
class ScriptedCoordinator : public AgentService::Service {
 public:
  int jobs = 1;
  bool forget_first_lease = false;    // the first LeaseJob answers NOT_FOUND
  bool leases_valid = true;           // what heartbeats answer
  bool revoke_first_session = false;  // the first LeaseJob answers UNAUTHENTICATED
  // Job i's checkpoint_dir; past the list, RootDir()/model.
  std::vector<std::string> checkpoint_dirs;

  grpc::Status Register(grpc::ServerContext* ctx, const RegisterRequest* req,
                        RegisterResponse* resp) override {
    absl::MutexLock lock(&mu_);
    if (BearerTokenOf(ctx->client_metadata()) != "enrol") {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "enrollment token rejected");
    }
    ++registrations_;
    device_ = req->device().name();
    resp->set_agent_id("agent-1");
    resp->set_session_key(absl::StrCat("sk-", registrations_));
    resp->set_heartbeat_interval_ms(20);
    return grpc::Status::OK;
  }
  // Every call after Register: the token and the newest session key.
  bool Authorized(grpc::ServerContext* ctx) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const bool ok =
        BearerTokenOf(ctx->client_metadata()) == "enrol" &&
        MetadataValue(ctx->client_metadata(), kSessionKey) == absl::StrCat("sk-", registrations_);
    unauthorized_ += !ok;
    return ok;
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const HeartbeatRequest* req,
                         HeartbeatResponse* resp) override {
    absl::MutexLock lock(&mu_);
    if (!Authorized(ctx)) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "session");
    ++heartbeats_;
    resp->set_lease_valid(leases_valid && req->lease_id() == "lease-1");
    return grpc::Status::OK;
  }
  grpc::Status LeaseJob(grpc::ServerContext* ctx, const LeaseJobRequest* req,
                        LeaseJobResponse* resp) override {
    absl::MutexLock lock(&mu_);
    if (forget_first_lease && leases_asked_++ == 0) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown agent");
    }
    if (revoke_first_session && !revoked_) {
      revoked_ = true;  // as when another agent registers under this name
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "session key not current");
    }
    if (!Authorized(ctx)) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "session");
    if (req->agent_id() != "agent-1" || handed_out_ >= jobs) return grpc::Status::OK;
    ++handed_out_;
    resp->set_has_job(true);
    resp->set_job_id("1");
    resp->set_lease_id("lease-1");
    resp->mutable_request()->set_checkpoint_dir(
        handed_out_ <= static_cast<int>(checkpoint_dirs.size()) ? checkpoint_dirs[handed_out_ - 1]
                                                                : RootDir() + "/model");
    resp->mutable_request()->add_prompt_lengths(100);
    resp->mutable_request()->set_decode_tokens(4);
    resp->mutable_request()->set_repeats(2);
    resp->mutable_request()->set_max_repeats(2);
    return grpc::Status::OK;
  }
  grpc::Status ReportResult(grpc::ServerContext* ctx, const ReportResultRequest* req,
                            ReportResultResponse* resp) override {
    absl::MutexLock lock(&mu_);
    if (!Authorized(ctx)) return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "session");
    reports_.push_back(*req);
    resp->set_accepted(true);
    return grpc::Status::OK;
  }

  int registrations() {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  int heartbeats() {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  int unauthorized() {
    absl::MutexLock lock(&mu_);
    return unauthorized_;
  }
  std::string device() {
    absl::MutexLock lock(&mu_);
    return device_;
  }
  std::vector<ReportResultRequest> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }

 private:
  absl::Mutex mu_;
  int registrations_ ABSL_GUARDED_BY(mu_) = 0;
  int heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  int leases_asked_ ABSL_GUARDED_BY(mu_) = 0;
  int unauthorized_ ABSL_GUARDED_BY(mu_) = 0;
  bool revoked_ ABSL_GUARDED_BY(mu_) = false;
  int handed_out_ ABSL_GUARDED_BY(mu_) = 0;
  std::string device_ ABSL_GUARDED_BY(mu_);
  std::vector<ReportResultRequest> reports_ ABSL_GUARDED_BY(mu_);
};

class AgentTest : public ::testing::Test {
 protected:
  void StartServer() {
    grpc::ServerBuilder builder;
    builder.RegisterService(&coordinator_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }
  AgentOptions Options(const std::string& token = "enrol") {
    AgentOptions o;
    o.channel = server_->InProcessChannel(grpc::ChannelArguments());
    o.enrollment_token = token;
    o.device.set_name("phone-1");
    o.lease_wait_ms = 50;
    o.backoff_initial_ms = 5;
    o.backoff_max_ms = 20;
    o.protocol.cooldown_ms = 0;
    std::filesystem::create_directories(RootDir());
    o.data_roots = DataRoots::Make({RootDir()}, "this agent's").value();
    return o;
  }

  ScriptedCoordinator coordinator_;
  std::unique_ptr<grpc::Server> server_;
};

// Paths are the coordinator's word only (issue 39): a job whose checkpoint
// leaves the agent's roots (by "..", by an absolute path elsewhere, by a
// symlink out) fails naming the cause, and the agent takes the next job.
TEST_F(AgentTest, JobsNamingPathsOutsideTheAgentsRootsAreRefusedAndTheAgentGoesOn) {
  const std::string outside = ::testing::TempDir() + "/agent_test_outside";
  std::filesystem::create_directories(outside);
  std::filesystem::create_directories(RootDir());
  std::filesystem::remove(RootDir() + "/link");
  std::filesystem::create_directory_symlink(outside, RootDir() + "/link");
  coordinator_.jobs = 5;
  coordinator_.checkpoint_dirs = {RootDir() + "/../agent_test_outside", outside,
                                  RootDir() + "/link/model", "model", RootDir() + "/model"};
  StartServer();
  AgentOptions o = Options();
  o.max_jobs = 5;
  Agent agent(o, std::make_unique<FakeRuntime>());
  std::atomic<bool> stop{false};
  ASSERT_TRUE(agent.Run(stop).ok());
  const std::vector<ReportResultRequest> reports = coordinator_.reports();
  ASSERT_EQ(reports.size(), 5u);
  const char* causes[] = {"contains \"..\"", "is outside this agent's data roots", "resolves to ",
                          "is not an absolute path"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(reports[i].result().failure(), UNSUPPORTED_ARCH) << i;
    EXPECT_THAT(reports[i].result().failure_message(), HasSubstr(causes[i])) << i;
    EXPECT_THAT(reports[i].result().failure_message(), HasSubstr("checkpoint_dir")) << i;
    EXPECT_EQ(reports[i].result().samples_size(), 0) << i;
  }
  EXPECT_EQ(reports[4].result().failure(), FAILURE_NONE) << reports[4].result().failure_message();
  EXPECT_EQ(reports[4].result().samples_size(), 2);
}

TEST_F(AgentTest, AnAgentWithoutDataRootsRunsNoCheckpointJobs) {
  coordinator_.jobs = 1;
  StartServer();
  AgentOptions o = Options();
  o.data_roots = DataRoots();
  o.max_jobs = 1;
  Agent agent(o, std::make_unique<FakeRuntime>());
  std::atomic<bool> stop{false};
  ASSERT_TRUE(agent.Run(stop).ok());
  const std::vector<ReportResultRequest> reports = coordinator_.reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].result().failure(), UNSUPPORTED_ARCH);
  EXPECT_THAT(reports[0].result().failure_message(), HasSubstr("--data-root"));
}

TEST_F(AgentTest, RegistersLeasesMeasuresAndReportsOneJob) {
  StartServer();
  AgentOptions o = Options();
  o.max_jobs = 1;
  Agent agent(o, std::make_unique<FakeRuntime>());
  std::atomic<bool> stop{false};
  ASSERT_TRUE(agent.Run(stop).ok());
  EXPECT_EQ(agent.jobs_done(), 1);
  EXPECT_EQ(coordinator_.device(), "phone-1");
  const std::vector<ReportResultRequest> reports = coordinator_.reports();
  ASSERT_EQ(reports.size(), 1u);
  const BenchmarkResult& r = reports[0].result();
  EXPECT_EQ(reports[0].lease_id(), "lease-1");
  EXPECT_EQ(r.failure(), FAILURE_NONE);
  EXPECT_EQ(r.device().runtime(), "fake");
  ASSERT_EQ(r.samples_size(), 2);  // repeats 2, max_repeats 2
  EXPECT_DOUBLE_EQ(r.samples(0).ttft_ms(), 10.0);
  ASSERT_EQ(r.summaries_size(), 1);
  EXPECT_DOUBLE_EQ(r.summaries(0).decode_median_ms_per_token(), 1.5);
  // Every lease, heartbeat and report carried the token and the session key.
  EXPECT_EQ(coordinator_.unauthorized(), 0);
}

TEST_F(AgentTest, ARevokedSessionIsRegisteredAgainWithANewKey) {
  coordinator_.revoke_first_session = true;
  StartServer();
  AgentOptions o = Options();
  o.max_jobs = 1;
  Agent agent(o, std::make_unique<FakeRuntime>());
  std::atomic<bool> stop{false};
  ASSERT_TRUE(agent.Run(stop).ok());
  EXPECT_EQ(coordinator_.registrations(), 2);
  EXPECT_EQ(coordinator_.reports().size(), 1u);
  EXPECT_EQ(coordinator_.unauthorized(), 0);  // only the new key was used after
}

TEST_F(AgentTest, UnreadableTlsFilesEndTheLoopNamingTheFlag) {
  AgentOptions o;
  o.coordinator = "127.0.0.1:1";
  o.tls.ca_file = "/nonexistent/ca.pem";
  o.device.set_name("phone-1");
  Agent agent(o, std::make_unique<FakeRuntime>());
  std::atomic<bool> stop{false};
  absl::Status s = agent.Run(stop);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--tls-ca /nonexistent/ca.pem"));
}

TEST_F(AgentTest, RejectedTokenEndsTheLoopWithUnauthenticated) {
  StartServer();
  Agent agent(Options("guess"), std::make_unique<FakeRuntime>());
  std::atomic<bool> stop{false};
  absl::Status s = agent.Run(stop);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnauthenticated);
  EXPECT_THAT(s.message(), HasSubstr("enrollment token rejected"));
  EXPECT_TRUE(coordinator_.reports().empty());
}

TEST_F(AgentTest, ACoordinatorThatForgotTheAgentIsRegisteredWithAgain) {
  coordinator_.forget_first_lease = true;
  StartServer();
  AgentOptions o = Options();
  o.max_jobs = 1;
  Agent agent(o, std::make_unique<FakeRuntime>());
  std::atomic<bool> stop{false};
  ASSERT_TRUE(agent.Run(stop).ok());
  EXPECT_EQ(coordinator_.registrations(), 2);
  EXPECT_EQ(coordinator_.reports().size(), 1u);
}

TEST_F(AgentTest, ALostLeaseStopsTheMeasurementAndIsNotReported) {
  coordinator_.leases_valid = false;
  StartServer();
  AgentOptions o = Options();
  o.max_jobs = 1;
  // Each run takes 60 ms and heartbeats come every 20 ms: the lease is
  // found lost before the two repeats are done.
  Agent agent(o, std::make_unique<FakeRuntime>(/*sleep_ms=*/60));
  std::atomic<bool> stop{false};
  ASSERT_TRUE(agent.Run(stop).ok());
  EXPECT_GE(coordinator_.heartbeats(), 1);
  EXPECT_TRUE(coordinator_.reports().empty());
}

TEST_F(AgentTest, StopEndsAnIdleAgent) {
  coordinator_.jobs = 0;
  StartServer();
  Agent agent(Options(), std::make_unique<FakeRuntime>());
  std::atomic<bool> stop{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stop = true;
  });
  EXPECT_TRUE(agent.Run(stop).ok());
  stopper.join();
  EXPECT_EQ(agent.jobs_done(), 0);
  EXPECT_EQ(coordinator_.registrations(), 1);
}

}  // namespace
}  // namespace hilnas
