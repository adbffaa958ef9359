// Coordinator and device agents as real processes over loopback gRPC with a
// real SQLite file: jobs survive a SIGKILLed agent and a restarted
// coordinator, each completing exactly once.
#include <grpcpp/grpcpp.h>
#include <sqlite3.h>

#include <filesystem>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/service.grpc.pb.h"
#include "tests/process.h"
#include "tests/tiny_job.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

using ::hilnas::testing::Process;
using ::hilnas::testing::TinyJob;
using ::hilnas::testing::WaitFor;
using ::testing::HasSubstr;
using ::testing::Not;

std::chrono::system_clock::time_point In(int64_t ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

class AgentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hilnas_agents_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }

  // Starts a coordinator on `port` (0: any) and waits until it serves.
  std::unique_ptr<Process> StartCoordinator(int port = 0, const std::string& token = "") {
    const std::string port_file = dir_ + "/port";
    std::filesystem::remove(port_file);
    std::vector<std::string> args = {"coordinator",
                                     absl::StrCat("--listen=127.0.0.1:", port),
                                     "--db=" + dir_ + "/coordinator.db",
                                     "--port_file=" + port_file,
                                     "--lease_ttl_ms=1500",
                                     "--heartbeat_ms=300"};
    if (!token.empty()) args.push_back("--token=" + token);
    auto p = std::make_unique<Process>(args, dir_ + "/coordinator.log");
    std::string text;
    EXPECT_TRUE(
        WaitFor([&] { return ReadFileToString(port_file, &text).ok() && !text.empty(); }, 30))
        << p->Log();
    EXPECT_TRUE(absl::SimpleAtoi(text, &port_)) << text;
    address_ = absl::StrCat("127.0.0.1:", port_);
    stub_ = UserService::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
    return p;
  }

  std::unique_ptr<Process> StartAgent(const std::string& name, const std::string& cpus,
                                      const std::string& token = "") {
    std::vector<std::string> args = {"agent",
                                     "--coordinator=" + address_,
                                     "--name=" + name,
                                     "--cpu_set=" + cpus,
                                     "--threads=1",
                                     "--cooldown_ms=0",
                                     "--max_foreign_cores=0",
                                     "--canary=false",
                                     "--data-root=" + dir_};
    if (!token.empty()) args.push_back("--token=" + token);
    return std::make_unique<Process>(args, dir_ + "/" + name + ".log");
  }

  std::string Submit(const BenchmarkRequest& r) {
    SubmitBenchmarkRequest req;
    *req.mutable_request() = r;
    SubmitBenchmarkResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(5000));
    grpc::Status s = stub_->SubmitBenchmark(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp.job_id();
  }

  GetJobResponse WaitJob(const std::string& id, int64_t wait_ms) {
    GetJobRequest req;
    req.set_job_id(id);
    req.set_wait_ms(wait_ms);
    GetJobResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(wait_ms + 5000));
    grpc::Status s = stub_->GetJob(&ctx, req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  std::map<std::string, AgentInfo> Agents() {
    ListAgentsResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(In(5000));
    std::map<std::string, AgentInfo> out;
    if (!stub_->ListAgents(&ctx, ListAgentsRequest(), &resp).ok()) return out;
    for (const AgentInfo& a : resp.agents()) out[a.device().name()] = a;
    return out;
  }

  // Rows of `sql` (one integer column) read straight from the SQLite file.
  std::vector<int64_t> Query(const std::string& sql) {
    sqlite3* db = nullptr;
    std::vector<int64_t> out;
    if (sqlite3_open_v2((dir_ + "/coordinator.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr) ==
        SQLITE_OK) {
      sqlite3_stmt* st = nullptr;
      if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK) {
        while (sqlite3_step(st) == SQLITE_ROW) out.push_back(sqlite3_column_int64(st, 0));
      }
      sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return out;
  }

  std::string dir_;
  int port_ = 0;
  std::string address_;
  std::unique_ptr<UserService::Stub> stub_;
};

TEST_F(AgentsTest, ThirtyJobsCompleteExactlyOnceWhenAnAgentIsKilledMidJob) {
  auto coordinator = StartCoordinator();
  std::vector<std::unique_ptr<Process>> agents;
  for (int i = 0; i < 3; ++i)
    agents.push_back(StartAgent(absl::StrCat("a", i), i == 1 ? "1" : "0"));
  ASSERT_TRUE(WaitFor([&] { return Agents().size() == 3; }, 30));

  std::vector<std::string> jobs;
  for (int i = 0; i < 30; ++i) jobs.push_back(Submit(TinyJob()));
  // Kill a1 while it holds a lease.
  ASSERT_TRUE(WaitFor([&] { return Agents()["a1"].state() == "busy"; }, 60));
  agents[1]->Signal(SIGKILL);
  EXPECT_EQ(agents[1]->Wait(), 128 + SIGKILL);

  for (const std::string& id : jobs) {
    GetJobResponse j;
    ASSERT_TRUE(WaitFor([&] { return (j = WaitJob(id, 5000)).state() == JOB_DONE; }, 180))
        << "job " << id << " state " << JobState_Name(j.state()) << "\n"
        << coordinator->Log();
    EXPECT_EQ(j.result().failure(), FAILURE_NONE);
    EXPECT_EQ(j.result().summaries_size(), 2);
  }
  // Exactly one accepted report per job; the killed agent's lease expired
  // and its job was re-leased to a survivor.
  EXPECT_THAT(Query("SELECT COUNT(*) FROM leases WHERE state = 'reported' GROUP BY job_id"),
              ::testing::AllOf(::testing::SizeIs(30), ::testing::Each(1)));
  EXPECT_GE(Query("SELECT COUNT(*) FROM leases WHERE state = 'expired'")[0], 1);
  EXPECT_THAT(Query("SELECT COUNT(*) FROM jobs WHERE state = 3"), ::testing::ElementsAre(30));
  auto final_agents = Agents();
  EXPECT_EQ(final_agents["a0"].jobs_done() + final_agents["a1"].jobs_done() +
                final_agents["a2"].jobs_done(),
            30);
  EXPECT_GT(final_agents["a0"].jobs_done(), 0);
  EXPECT_GT(final_agents["a2"].jobs_done(), 0);
}

TEST_F(AgentsTest, AgentReconnectsAfterCoordinatorRestartAndBenchPrintsResult) {
  auto coordinator = StartCoordinator();
  auto agent = StartAgent("phone", "0");
  const std::string first = Submit(TinyJob());
  ASSERT_TRUE(WaitFor([&] { return WaitJob(first, 5000).state() == JOB_DONE; }, 60));

  coordinator->Signal(SIGTERM);
  EXPECT_EQ(coordinator->Wait(), 0);
  ASSERT_TRUE(WaitFor([&] { return agent->Log().find("retrying") != std::string::npos; }, 30))
      << agent->Log();
  coordinator = StartCoordinator(port_);  // same port, same database

  // The user-facing command, as a user runs it.
  Process bench({"bench", "--coordinator=" + address_,
                 "--arch=" + std::string(HILNAS_SOURCE_DIR) + "/configs/tiny-arch.textproto",
                 "--prompt_lengths=32,64", "--decode_tokens=4", "--repeats=2"},
                dir_ + "/bench.log");
  EXPECT_EQ(bench.Wait(), 0) << bench.Log() << agent->Log();
  EXPECT_THAT(bench.Log(), HasSubstr("TTFT median ms"));
  EXPECT_THAT(bench.Log(), HasSubstr("device phone"));
  // The decode kernel's form the agent tuned on the job's model, reported
  // in the result (DeviceIdentity.runtime_kernels).
  EXPECT_THAT(bench.Log(), HasSubstr(", GEMV form ")) << agent->Log();
  EXPECT_EQ(Agents()["phone"].jobs_done(), 2);
  // The first job's result is still there after the restart.
  EXPECT_EQ(WaitJob(first, 0).state(), JOB_DONE);
}

// Test-retest (issue 18): `latency collect --passes 2` measures every
// architecture twice, each pass in its own order after the other, and
// `latency eval` reports pass 1 against pass 2 beside the GP.
TEST_F(AgentsTest, LatencyCollectTwoPassesAndEvalReportsTheRetestCeiling) {
  auto coordinator = StartCoordinator();
  auto agent = StartAgent("retest", "0");
  const std::string space = std::string(HILNAS_SOURCE_DIR) + "/configs/small-space.textproto";
  const std::string csv = dir_ + "/retest.csv";
  Process collect({"latency", "collect", "--coordinator=" + address_, "--space=" + space, "--n=8",
                   "--passes=2", "--prompt_lengths=32", "--decode_tokens=2", "--repeats=2",
                   "--max_repeats=2", "--threads=1", "--out=" + csv},
                  dir_ + "/collect.log");
  ASSERT_EQ(collect.Wait(), 0) << collect.Log() << agent->Log();
  std::string text;
  ASSERT_TRUE(ReadFileToString(csv, &text).ok());
  int pass1 = 0, pass2 = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    if (line[0] == '#' || f.size() < 11) continue;
    pass1 += f[10] == "1";
    pass2 += f[10] == "2";
  }
  EXPECT_EQ(pass1, 8) << text;
  EXPECT_EQ(pass2, 8) << text;
  Process eval({"latency", "eval", "--space=" + space, "--data=" + csv, "--folds=4"},
               dir_ + "/eval.log");
  ASSERT_EQ(eval.Wait(), 0) << eval.Log();
  EXPECT_THAT(eval.Log(), HasSubstr("test-retest ceiling (pass 1 vs 2, 8 archs)"));
  EXPECT_THAT(eval.Log(), HasSubstr("within 10%"));
}

// `kv_cache: SLIM` in an ArchSpec makes the agent build and time the K-only
// cache (Slim Attention Sec. 2); its KV cache is exactly half the standard
// twin's at every prompt length. `ppd` makes it decode pipelined.
TEST_F(AgentsTest, SlimCacheAndPipelinedDecodingCandidatesAreMeasured) {
  auto coordinator = StartCoordinator();
  auto agent = StartAgent("phone", "0");
  BenchmarkRequest standard = TinyJob();
  standard.mutable_arch()->set_num_kv_heads(4);  // MHA: 4 heads x 16 = d_model 64
  BenchmarkRequest slim = standard;
  slim.mutable_arch()->set_kv_cache(SLIM);
  const std::string standard_id = Submit(standard), slim_id = Submit(slim);
  ASSERT_TRUE(WaitFor([&] { return WaitJob(slim_id, 5000).state() == JOB_DONE; }, 120))
      << agent->Log();
  ASSERT_TRUE(WaitFor([&] { return WaitJob(standard_id, 5000).state() == JOB_DONE; }, 120));
  const BenchmarkResult s = WaitJob(slim_id, 0).result(), f = WaitJob(standard_id, 0).result();
  ASSERT_EQ(s.samples_size(), f.samples_size());
  ASSERT_GT(s.samples_size(), 0);
  for (int i = 0; i < s.samples_size(); ++i) {
    EXPECT_GT(s.samples(i).kv_cache_bytes(), 0);
    EXPECT_EQ(2 * s.samples(i).kv_cache_bytes(), f.samples(i).kv_cache_bytes());
    EXPECT_GT(s.samples(i).ttft_ms(), 0);
  }
  // Pipelined decoding (timed at a given match rate) runs on the agent too.
  BenchmarkRequest ppd = TinyJob();
  ppd.mutable_arch()->mutable_ppd()->set_layer(3);
  ppd.mutable_arch()->mutable_ppd()->set_k(1);
  ppd.mutable_arch()->mutable_ppd()->set_timing_match_rate(0.8);
  const std::string ppd_id = Submit(ppd);
  ASSERT_TRUE(WaitFor([&] { return WaitJob(ppd_id, 5000).state() == JOB_DONE; }, 120))
      << agent->Log();
  EXPECT_GT(WaitJob(ppd_id, 0).result().summaries(0).decode_median_ms_per_token(), 0);
  // GQA cannot be slim: the coordinator refuses the job at submission,
  // before any agent is handed an architecture it cannot build.
  BenchmarkRequest gqa = TinyJob();
  gqa.mutable_arch()->set_kv_cache(SLIM);
  SubmitBenchmarkRequest req;
  *req.mutable_request() = gqa;
  SubmitBenchmarkResponse resp;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(5000));
  grpc::Status refused = stub_->SubmitBenchmark(&ctx, req, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("kv_cache SLIM needs multi-head attention"));
}

TEST_F(AgentsTest, AgentWithWrongTokenIsRejectedAndExits) {
  auto coordinator = StartCoordinator(0, "s3cret");
  auto agent = StartAgent("intruder", "0", "guess");
  EXPECT_EQ(agent->Wait(), 1);
  EXPECT_THAT(agent->Log(), HasSubstr("enrollment token rejected"));
  EXPECT_TRUE(Agents().empty());
}

// An agent told to run more threads than its CPU set holds says its
// prices are those of threads taking turns (it still runs: an emulated
// phone's 4 threads on a 2-core host check the kernels, not the speed).
TEST_F(AgentsTest, AnAgentWithFewerCpusThanThreadsSaysSo) {
  auto coordinator = StartCoordinator(0, "s3cret");
  Process agent({"agent", "--coordinator=" + address_, "--name=crowded", "--cpu_set=0",
                 "--threads=2", "--canary=false", "--token=guess"},
                dir_ + "/crowded.log");
  EXPECT_EQ(agent.Wait(), 1);  // the token is wrong: it stops once registering fails
  EXPECT_THAT(agent.Log(), HasSubstr("crowded: warning: 2 threads on 1 CPUs (0)"));
  auto fits = StartAgent("roomy", "0", "guess");
  EXPECT_EQ(fits->Wait(), 1);
  EXPECT_THAT(fits->Log(), Not(HasSubstr("warning: ")));
}

TEST_F(AgentsTest, ASecondLiveAgentWithTheSameNameIsRefusedUntilTheFirstIsGone) {
  auto coordinator = StartCoordinator();
  auto first = StartAgent("twin", "0");
  ASSERT_TRUE(
      WaitFor([&] { return first->Log().find("registered with") != std::string::npos; }, 30))
      << first->Log();
  // Its own log (StartAgent names the log after the agent).
  auto second = std::make_unique<Process>(
      std::vector<std::string>{"agent", "--coordinator=" + address_, "--name=twin", "--cpu_set=1",
                               "--threads=1", "--cooldown_ms=0", "--max_foreign_cores=0",
                               "--canary=false"},
      dir_ + "/twin-2.log");
  ASSERT_TRUE(
      WaitFor([&] { return second->Log().find("has a live session") != std::string::npos; }, 30))
      << second->Log();
  // The first stays idle in long polls past the 1.5 s lease lifetime: a
  // parked agent counts as alive, so the name stays taken.
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(second->Log().find("registered with"), std::string::npos) << second->Log();
  EXPECT_EQ(Agents().size(), 1u);
  // The first dies; once its session has been silent for a lease's
  // lifetime (1.5 s here) the name is free and the second takes it.
  first->Signal(SIGKILL);
  first->Wait();
  EXPECT_TRUE(
      WaitFor([&] { return second->Log().find("registered with") != std::string::npos; }, 30))
      << second->Log();
}

TEST_F(AgentsTest, ABadCheckpointFailsItsJobWithTheCauseAndTheAgentLivesOn) {
  auto coordinator = StartCoordinator();
  auto agent = StartAgent("phone", "0");
  // A folder where the weights belong: this used to abort every agent that
  // leased the job, until it failed as "lease expired 3 times".
  const std::string ckpt = dir_ + "/broken";
  std::filesystem::copy(std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone", ckpt,
                        std::filesystem::copy_options::recursive);
  std::filesystem::remove(ckpt + "/model.safetensors");
  std::filesystem::create_directory(ckpt + "/model.safetensors");
  BenchmarkRequest bad;
  bad.set_checkpoint_dir(ckpt);
  bad.add_prompt_lengths(16);
  bad.set_repeats(1);
  bad.set_max_repeats(1);
  const std::string bad_id = Submit(bad);
  ASSERT_TRUE(WaitFor([&] { return WaitJob(bad_id, 5000).state() == JOB_FAILED; }, 60))
      << agent->Log();
  const GetJobResponse failed = WaitJob(bad_id, 0);
  EXPECT_THAT(failed.result().failure_message(), HasSubstr("model.safetensors is a directory"));
  EXPECT_EQ(failed.result().device().name(), "phone");  // the agent reported it itself
  const std::string good_id = Submit(TinyJob());
  ASSERT_TRUE(WaitFor([&] { return WaitJob(good_id, 5000).state() == JOB_DONE; }, 120))
      << agent->Log();
  EXPECT_TRUE(agent->running());
}

TEST_F(AgentsTest, FleetPinsEachAgentToItsOwnCpus) {
  auto coordinator = StartCoordinator();
  Process fleet({"fleet", "--coordinator=" + address_, "--agents=2", "--fleet_threads=1",
                 "--max_jobs=1", "--cooldown_ms=0", "--max_foreign_cores=0", "--canary=false"},
                dir_ + "/fleet.log");
  ASSERT_TRUE(WaitFor([&] { return Agents().size() == 2; }, 30)) << fleet.Log();
  auto agents = Agents();
  EXPECT_EQ(agents["fleet-0"].device().cpu_set(), "0");
  EXPECT_EQ(agents["fleet-1"].device().cpu_set(), "1");
  EXPECT_EQ(agents["fleet-0"].device().threads(), 1);
  BenchmarkRequest r = TinyJob();
  r.clear_threads();  // the agent's own thread count applies
  Submit(r);
  Submit(r);
  EXPECT_EQ(fleet.Wait(), 0) << fleet.Log();  // each agent did its one job and exited
  EXPECT_THAT(fleet.Log(), HasSubstr("all 2 agents exited, 0 with an error"));
}

}  // namespace
}  // namespace hilnas
