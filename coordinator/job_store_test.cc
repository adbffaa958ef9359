#include "coordinator/job_store.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::HasSubstr;

class JobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "/" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".db";
    std::filesystem::remove(path_);
    Reopen();
  }
  void Reopen() {
    store_.reset();
    JobStoreOptions o;
    o.lease_ttl_ms = 1000;
    o.max_attempts = 2;
    auto s = JobStore::Open(path_, &clock_, o);
    ASSERT_TRUE(s.ok()) << s.status();
    store_ = *std::move(s);
  }
  std::string Register(const std::string& name, std::vector<std::string> pools = {}) {
    DeviceIdentity d;
    d.set_name(name);
    for (auto& p : pools) d.add_pools(p);
    auto session = store_->RegisterAgent(d);
    EXPECT_TRUE(session.ok()) << session.status();
    return session.ok() ? session->agent_id : "";
  }
  int64_t Submit(const std::string& device = "", const std::string& pool = "") {
    BenchmarkRequest r;
    r.set_checkpoint_dir("/ckpt");
    r.add_prompt_lengths(256);
    auto id = store_->SubmitJob(r, device, pool);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }
  Lease MustLease(const std::string& agent) {
    auto l = store_->LeaseJob(agent);
    EXPECT_TRUE(l.ok() && l->has_value()) << l.status();
    return l.ok() && l->has_value() ? **l : Lease();
  }
  BenchmarkResult Done() {
    BenchmarkResult r;
    r.add_samples()->set_ttft_ms(12);
    return r;
  }

  // A result carrying a canary reading taken at `at_ms`.
  static BenchmarkResult WithCanary(double ttft_ms, double decode_ms, int64_t at_ms,
                                    int prompt = 256) {
    BenchmarkResult r;
    r.add_samples()->set_ttft_ms(12);
    CanaryReading& c = *r.mutable_canary();
    c.mutable_request()->add_prompt_lengths(prompt);
    c.set_ttft_ms(ttft_ms);
    c.set_decode_ms_per_token(decode_ms);
    c.set_measured_unix_ms(at_ms);
    c.set_ttft_ratio(1.0);  // an agent's own claim; the coordinator recomputes it
    return r;
  }

  std::string path_;
  ManualClock clock_;
  std::unique_ptr<JobStore> store_;
};

TEST_F(JobStoreTest, LeaseThenReportCompletesJobOnce) {
  const std::string a = Register("phone-a");
  const int64_t job = Submit();
  Lease l = MustLease(a);
  EXPECT_EQ(l.job_id, job);
  ASSERT_OK_AND_ASSIGN(JobRecord leased, store_->GetJob(job));
  EXPECT_EQ(leased.state, LEASED);
  ASSERT_OK_AND_ASSIGN(ReportOutcome o, store_->ReportResult(a, job, l.lease_id, Done()));
  EXPECT_EQ(o, ReportOutcome::kAccepted);
  ASSERT_OK_AND_ASSIGN(ReportOutcome again, store_->ReportResult(a, job, l.lease_id, Done()));
  EXPECT_EQ(again, ReportOutcome::kDuplicate);
  ASSERT_OK_AND_ASSIGN(JobRecord done, store_->GetJob(job));
  EXPECT_EQ(done.state, JOB_DONE);
  ASSERT_TRUE(done.result.has_value());
  EXPECT_EQ(done.result->samples(0).ttft_ms(), 12);
  EXPECT_EQ(store_->AcceptedReports(job).value_or(-1), 1);
  ASSERT_OK_AND_ASSIGN(auto agents, store_->ListAgents());
  EXPECT_EQ(agents[0].jobs_done, 1);  // the duplicate was not counted
}

TEST_F(JobStoreTest, ExpiredLeaseMakesJobStaleAndLateReportIsRejected) {
  const std::string a = Register("phone-a"), b = Register("phone-b");
  const int64_t job = Submit();
  Lease la = MustLease(a);
  clock_.AdvanceMs(1500);
  ASSERT_OK_AND_ASSIGN(int expired, store_->ExpireLeases());
  EXPECT_EQ(expired, 1);
  ASSERT_OK_AND_ASSIGN(JobRecord stale, store_->GetJob(job));
  EXPECT_EQ(stale.state, STALE);
  Lease lb = MustLease(b);
  EXPECT_EQ(lb.job_id, job);
  EXPECT_THAT(store_->ReportResult(a, job, la.lease_id, Done()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("expired")));
  ASSERT_OK(store_->ReportResult(b, job, lb.lease_id, Done()).status());
  EXPECT_EQ(store_->AcceptedReports(job).value_or(-1), 1);
}

TEST_F(JobStoreTest, HeartbeatKeepsLeaseAlive) {
  const std::string a = Register("phone-a");
  const int64_t job = Submit();
  Lease l = MustLease(a);
  for (int i = 0; i < 5; ++i) {
    clock_.AdvanceMs(800);
    ASSERT_OK_AND_ASSIGN(bool valid, store_->Heartbeat(a, l.lease_id));
    EXPECT_TRUE(valid);
  }
  ASSERT_OK(store_->ReportResult(a, job, l.lease_id, Done()).status());
}

TEST_F(JobStoreTest, RestartedAgentGetsItsOwnLeaseBack) {
  DeviceIdentity d;
  d.set_name("phone-a");
  ASSERT_OK_AND_ASSIGN(AgentSession s, store_->RegisterAgent(d));
  Submit();
  Submit();
  Lease first = MustLease(s.agent_id);
  // The process restarted, keeping its session key.
  ASSERT_OK_AND_ASSIGN(AgentSession again, store_->RegisterAgent(d, s.session_key));
  EXPECT_EQ(again.agent_id, s.agent_id);
  Lease second = MustLease(again.agent_id);
  EXPECT_EQ(second.lease_id, first.lease_id);
  EXPECT_EQ(second.job_id, first.job_id);
}

TEST_F(JobStoreTest, ASecondAgentWithALiveNameIsRefusedUntilTheFirstFallsSilent) {
  DeviceIdentity d;
  d.set_name("phone-a");
  ASSERT_OK_AND_ASSIGN(AgentSession first, store_->RegisterAgent(d));
  const int64_t job = Submit();
  Lease l = MustLease(first.agent_id);
  clock_.AdvanceMs(500);
  EXPECT_THAT(store_->RegisterAgent(d),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("has a live session")));
  EXPECT_THAT(store_->RegisterAgent(d, "not-the-key"),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("phone-a")));
  // Silent for a lease's lifetime: the lease expired, the name is free.
  clock_.AdvanceMs(1000);
  ASSERT_OK(store_->ExpireLeases().status());
  ASSERT_OK_AND_ASSIGN(AgentSession second, store_->RegisterAgent(d));
  EXPECT_NE(second.session_key, first.session_key);
  ASSERT_OK_AND_ASSIGN(JobRecord j, store_->GetJob(job));
  EXPECT_EQ(j.state, STALE);
  EXPECT_THAT(j.message, HasSubstr("agent died during the job (phone-a"));
  (void)l;
}

TEST_F(JobStoreTest, JobFailsAfterMaxAttemptsOfExpiry) {
  const std::string a = Register("phone-a");
  const int64_t job = Submit();
  for (int i = 0; i < 2; ++i) {
    MustLease(a);
    clock_.AdvanceMs(1500);
    ASSERT_OK(store_->ExpireLeases().status());
  }
  ASSERT_OK_AND_ASSIGN(JobRecord j, store_->GetJob(job));
  EXPECT_EQ(j.state, JOB_FAILED);
  EXPECT_THAT(j.message, HasSubstr("agent died during the job 2 times (phone-a, phone-a"));
  ASSERT_OK_AND_ASSIGN(auto none, store_->LeaseJob(a));
  EXPECT_FALSE(none.has_value());
}

TEST_F(JobStoreTest, StructuredFailureEndsJobAsFailed) {
  const std::string a = Register("phone-a");
  const int64_t job = Submit();
  Lease l = MustLease(a);
  BenchmarkResult oom;
  oom.set_failure(OUT_OF_MEMORY);
  oom.set_failure_message("needs 9 GiB");
  ASSERT_OK(store_->ReportResult(a, job, l.lease_id, oom).status());
  ASSERT_OK_AND_ASSIGN(JobRecord j, store_->GetJob(job));
  EXPECT_EQ(j.state, JOB_FAILED);
  EXPECT_EQ(j.result->failure(), OUT_OF_MEMORY);
}

TEST_F(JobStoreTest, JobsGoOnlyToTheNamedDeviceOrPool) {
  const std::string a = Register("phone-a", {"s25"}), b = Register("phone-b", {"pixel"});
  const int64_t for_b = Submit("phone-b");
  const int64_t for_s25 = Submit("", "s25");
  EXPECT_EQ(MustLease(a).job_id, for_s25);
  EXPECT_EQ(MustLease(b).job_id, for_b);
}

TEST_F(JobStoreTest, UnknownAgentAndForeignLeaseAreRejected) {
  EXPECT_THAT(store_->LeaseJob("agent-nobody"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("unknown agent")));
  const std::string a = Register("phone-a"), b = Register("phone-b");
  const int64_t job = Submit();
  Lease l = MustLease(a);
  EXPECT_THAT(store_->ReportResult(b, job, l.lease_id, Done()),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("not agent")));
  EXPECT_THAT(store_->ReportResult(a, job, "lease-bogus", Done()),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("lease-bogus")));
}

TEST_F(JobStoreTest, OnlyTheCurrentSessionKeyOfAnAgentIsAccepted) {
  DeviceIdentity d;
  d.set_name("phone-a");
  ASSERT_OK_AND_ASSIGN(AgentSession first, store_->RegisterAgent(d));
  EXPECT_EQ(first.session_key.size(), 64u);
  EXPECT_OK(store_->CheckSession(first.agent_id, first.session_key));
  EXPECT_THAT(store_->CheckSession(first.agent_id, ""),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("session key")));
  EXPECT_THAT(store_->CheckSession(first.agent_id, "guess"),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("session key")));
  EXPECT_THAT(store_->CheckSession("agent-nobody", first.session_key),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("session key")));
  // Registering the name again (once the first went silent) keeps the id
  // and ends the old session.
  clock_.AdvanceMs(2000);
  ASSERT_OK_AND_ASSIGN(AgentSession second, store_->RegisterAgent(d));
  EXPECT_EQ(second.agent_id, first.agent_id);
  EXPECT_NE(second.session_key, first.session_key);
  EXPECT_THAT(store_->CheckSession(first.agent_id, first.session_key),
              StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("session key")));
  EXPECT_OK(store_->CheckSession(second.agent_id, second.session_key));
  Reopen();  // sessions survive a coordinator restart
  EXPECT_OK(store_->CheckSession(second.agent_id, second.session_key));
}

TEST_F(JobStoreTest, TheDatabaseHoldsOnlyADigestOfTheSessionKey) {
  DeviceIdentity d;
  d.set_name("phone-a");
  ASSERT_OK_AND_ASSIGN(AgentSession s, store_->RegisterAgent(d));
  store_.reset();
  std::ifstream in(path_, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ifstream wal(path_ + "-wal", std::ios::binary);
  const std::string wal_bytes((std::istreambuf_iterator<char>(wal)),
                              std::istreambuf_iterator<char>());
  EXPECT_EQ(bytes.find(s.session_key), std::string::npos);
  EXPECT_EQ(wal_bytes.find(s.session_key), std::string::npos);
}

TEST_F(JobStoreTest, UnfinishedJobsCountsQueuedLeasedAndStale) {
  const std::string a = Register("phone-a");
  for (int i = 0; i < 3; ++i) Submit();
  ASSERT_OK_AND_ASSIGN(int64_t before, store_->UnfinishedJobs());
  EXPECT_EQ(before, 3);
  Lease l = MustLease(a);
  ASSERT_OK_AND_ASSIGN(int64_t leased, store_->UnfinishedJobs());
  EXPECT_EQ(leased, 3);
  ASSERT_OK(store_->ReportResult(a, l.job_id, l.lease_id, Done()).status());
  ASSERT_OK_AND_ASSIGN(int64_t after, store_->UnfinishedJobs());
  EXPECT_EQ(after, 2);
}

TEST_F(JobStoreTest, InvalidRequestIsRejectedAtSubmit) {
  BenchmarkRequest r;
  EXPECT_THAT(store_->SubmitJob(r, "", ""),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("arch or checkpoint_dir")));
}

TEST_F(JobStoreTest, StateSurvivesReopen) {
  const std::string a = Register("phone-a");
  const int64_t job = Submit();
  Lease l = MustLease(a);
  Reopen();  // the coordinator restarted
  ASSERT_OK(store_->ReportResult(a, job, l.lease_id, Done()).status());
  ASSERT_OK_AND_ASSIGN(JobRecord j, store_->GetJob(job));
  EXPECT_EQ(j.state, JOB_DONE);
}

// As root, permissions do not bind: the check runs in a child that drops to
// the unprivileged user "nobody" (65534) first.
std::string OpenInReadOnlyFolderAsUnprivileged(const std::string& dir) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (geteuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(2);
    ManualClock clock;
    auto store = JobStore::Open(dir + "/jobs.db", &clock);
    const std::string msg = store.ok() ? "opened" : store.status().ToString();
    (void)!write(fds[1], msg.data(), msg.size());
    _exit(0);
  }
  close(fds[1]);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) out.append(buf, n);
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return out;
}

TEST_F(JobStoreTest, AReadOnlyFolderIsReportedAsSuchNotAsABadFile) {
  const std::string dir = ::testing::TempDir() + "/job_store_read_only";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::permissions(
      dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec |
               std::filesystem::perms::group_read | std::filesystem::perms::group_exec |
               std::filesystem::perms::others_read | std::filesystem::perms::others_exec);
  const std::string msg = OpenInReadOnlyFolderAsUnprivileged(dir);
  EXPECT_THAT(msg, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(msg, HasSubstr("is not writable"));
  EXPECT_THAT(msg, ::testing::Not(HasSubstr("not a usable SQLite file")));
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
}

TEST_F(JobStoreTest, NonDatabaseFileIsRejectedWithItsName) {
  const std::string bad = ::testing::TempDir() + "/not_a_db.db";
  {
    std::ofstream(bad) << "this is not sqlite, just text that is long enough to look like a header";
  }
  EXPECT_THAT(JobStore::Open(bad, &clock_),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not_a_db.db")));
}

TEST_F(JobStoreTest, AgentStateReflectsLeasesAndHeartbeats) {
  const std::string a = Register("phone-a");
  Submit();
  ASSERT_OK_AND_ASSIGN(auto agents, store_->ListAgents());
  EXPECT_EQ(agents[0].state, AgentState::kIdle);
  MustLease(a);
  ASSERT_OK_AND_ASSIGN(agents, store_->ListAgents());
  EXPECT_EQ(agents[0].state, AgentState::kBusy);
  clock_.AdvanceMs(60'000);
  ASSERT_OK_AND_ASSIGN(agents, store_->ListAgents());
  EXPECT_EQ(agents[0].state, AgentState::kOffline);
}

TEST_F(JobStoreTest, SubmitWithTheSameClientKeyReturnsTheFirstJob) {
  BenchmarkRequest r;
  r.set_checkpoint_dir("/ckpt");
  r.add_prompt_lengths(256);
  ASSERT_OK_AND_ASSIGN(int64_t a, store_->SubmitJob(r, "", "", "campaign/x/trial/1"));
  Reopen();  // a restarted coordinator re-submits
  ASSERT_OK_AND_ASSIGN(int64_t b, store_->SubmitJob(r, "", "", "campaign/x/trial/1"));
  ASSERT_OK_AND_ASSIGN(int64_t c, store_->SubmitJob(r, "", "", "campaign/x/trial/2"));
  ASSERT_OK_AND_ASSIGN(int64_t d, store_->SubmitJob(r, "", ""));
  ASSERT_OK_AND_ASSIGN(int64_t e, store_->SubmitJob(r, "", ""));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(d, e);  // no key: every submission is a job
}

// A database written by the v1 schema (no jobs.client_key) opens, keeps
// its jobs and gains idempotent submission.
TEST(JobStoreMigrationTest, Version1FilesMigrateInPlaceKeepingTheirJobs) {
  const std::string path = ::testing::TempDir() + "/job_store_v1.db";
  std::filesystem::remove(path);
  {
    auto db = SqliteDb::Open(path);
    ASSERT_TRUE(db.ok());
    ASSERT_OK((*db)->Exec(R"sql(
CREATE TABLE agents(agent_id TEXT PRIMARY KEY, name TEXT UNIQUE NOT NULL, device BLOB NOT NULL,
  registered_ms INTEGER NOT NULL, last_heartbeat_ms INTEGER NOT NULL,
  jobs_done INTEGER NOT NULL DEFAULT 0, jobs_failed INTEGER NOT NULL DEFAULT 0);
CREATE TABLE jobs(job_id INTEGER PRIMARY KEY AUTOINCREMENT, request BLOB NOT NULL,
  device TEXT NOT NULL DEFAULT '', pool TEXT NOT NULL DEFAULT '', state INTEGER NOT NULL,
  attempts INTEGER NOT NULL DEFAULT 0, agent_id TEXT NOT NULL DEFAULT '',
  created_ms INTEGER NOT NULL, finished_ms INTEGER NOT NULL DEFAULT 0, result BLOB,
  message TEXT NOT NULL DEFAULT '');
INSERT INTO jobs(request, state, created_ms) VALUES(x'', 1, 5);
PRAGMA user_version = 1;)sql"));
  }
  ManualClock clock;
  auto store = JobStore::Open(path, &clock);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_OK_AND_ASSIGN(JobRecord old, (*store)->GetJob(1));
  EXPECT_EQ(old.state, QUEUED);
  BenchmarkRequest r;
  r.set_checkpoint_dir("/ckpt");
  r.add_prompt_lengths(256);
  ASSERT_OK_AND_ASSIGN(int64_t a, (*store)->SubmitJob(r, "", "", "k"));
  ASSERT_OK_AND_ASSIGN(int64_t b, (*store)->SubmitJob(r, "", "", "k"));
  EXPECT_EQ(a, 2);
  EXPECT_EQ(a, b);
}

TEST_F(JobStoreTest, AJobMeasuredWhileTheCanaryDriftedGoesBackUntilItsRetriesRunOut) {
  const std::string a = Register("phone-a");
  const int64_t first = Submit();
  Lease l = MustLease(a);
  CanaryReading judged;
  ASSERT_OK_AND_ASSIGN(ReportOutcome o, store_->ReportResult(a, first, l.lease_id,
                                                             WithCanary(10, 1, 1000), &judged));
  EXPECT_EQ(o, ReportOutcome::kAccepted);
  EXPECT_DOUBLE_EQ(judged.ttft_ratio(), 1.0);
  EXPECT_DOUBLE_EQ(judged.baseline_ttft_ms(), 10);

  // 30% slower than the baseline: re-queued, nothing stored, twice.
  const int64_t job = Submit();
  for (int i = 1; i <= 2; ++i) {
    l = MustLease(a);
    ASSERT_EQ(l.job_id, job);
    ASSERT_OK_AND_ASSIGN(o, store_->ReportResult(a, job, l.lease_id,
                                                 WithCanary(13, 1.05, 1000 + i * 1000), &judged));
    EXPECT_EQ(o, ReportOutcome::kRequeuedForDrift);
    EXPECT_NEAR(judged.ttft_ratio(), 1.3, 1e-9);
    EXPECT_NEAR(judged.decode_ratio(), 1.05, 1e-9);
    EXPECT_TRUE(judged.drifted());
    EXPECT_EQ(judged.requeues(), i - 1);
    ASSERT_OK_AND_ASSIGN(JobRecord j, store_->GetJob(job));
    EXPECT_EQ(j.state, QUEUED);
    EXPECT_FALSE(j.result.has_value());
    EXPECT_EQ(j.drift_requeues, i);
    EXPECT_THAT(j.message, HasSubstr(absl::StrCat("1.30x TTFT, 1.05x decode of the agent's "
                                                  "baseline (tolerance 0.10); re-queued (",
                                                  i, " of 2)")));
  }
  // Back within tolerance: kept, with its ratio and the re-queues it took.
  l = MustLease(a);
  ASSERT_OK_AND_ASSIGN(o, store_->ReportResult(a, job, l.lease_id, WithCanary(10.5, 1, 4000)));
  EXPECT_EQ(o, ReportOutcome::kAccepted);
  ASSERT_OK_AND_ASSIGN(JobRecord done, store_->GetJob(job));
  EXPECT_EQ(done.state, JOB_DONE);
  EXPECT_EQ(done.attempts, 3);
  ASSERT_TRUE(done.result.has_value());
  EXPECT_NEAR(done.result->canary().ttft_ratio(), 1.05, 1e-9);
  EXPECT_EQ(done.result->canary().requeues(), 2);
  EXPECT_FALSE(done.result->canary().drifted());

  // Still drifted after the retries: kept, marked drifted.
  const int64_t stubborn = Submit();
  for (int i = 0; i < 3; ++i) {
    l = MustLease(a);
    ASSERT_OK_AND_ASSIGN(
        o, store_->ReportResult(a, stubborn, l.lease_id, WithCanary(14, 1, 5000 + i * 1000)));
    EXPECT_EQ(o, i < 2 ? ReportOutcome::kRequeuedForDrift : ReportOutcome::kAccepted);
  }
  ASSERT_OK_AND_ASSIGN(JobRecord kept, store_->GetJob(stubborn));
  EXPECT_EQ(kept.state, JOB_DONE);
  EXPECT_TRUE(kept.result->canary().drifted());

  // The agent's history: every reading once, the newest with its ratios.
  ASSERT_OK_AND_ASSIGN(std::vector<AgentRecord> agents, store_->ListAgents());
  ASSERT_EQ(agents.size(), 1u);
  EXPECT_EQ(agents[0].canaries, 7);
  ASSERT_TRUE(agents[0].last_canary.has_value());
  EXPECT_NEAR(agents[0].last_canary->ttft_ratio(), 1.4, 1e-9);
}

TEST_F(JobStoreTest, TheBaselineIsALowPercentileOfTheSameCanarysReadings) {
  const std::string a = Register("phone-a");
  CanaryReading judged;
  auto report = [&](const BenchmarkResult& r) {
    const int64_t job = Submit();
    Lease l = MustLease(a);
    auto o = store_->ReportResult(a, job, l.lease_id, r, &judged);
    ASSERT_TRUE(o.ok()) << o.status();
  };
  report(WithCanary(12, 1, 1000));
  report(WithCanary(10, 1, 2000));  // faster: the new baseline, ratio 1
  EXPECT_DOUBLE_EQ(judged.ttft_ratio(), 1.0);
  report(WithCanary(10.8, 1, 3000));
  EXPECT_NEAR(judged.ttft_ratio(), 1.08, 1e-9);
  EXPECT_DOUBLE_EQ(judged.baseline_ttft_ms(), 10);
  // Another canary benchmark has its own baseline.
  report(WithCanary(40, 3, 4000, /*prompt=*/1024));
  EXPECT_DOUBLE_EQ(judged.ttft_ratio(), 1.0);
  EXPECT_DOUBLE_EQ(judged.baseline_ttft_ms(), 40);
  // Past 10 readings one lucky one no longer sets the baseline: of 12, 10,
  // 10.8, 9 and 8 x 9.8, the second fastest does.
  report(WithCanary(9, 1, 5000));
  EXPECT_DOUBLE_EQ(judged.baseline_ttft_ms(), 9);
  for (int i = 0; i < 8; ++i) report(WithCanary(9.8, 1, 6000 + i));
  EXPECT_DOUBLE_EQ(judged.baseline_ttft_ms(), 9.8);
  EXPECT_DOUBLE_EQ(judged.ttft_ratio(), 1.0);
}

TEST_F(JobStoreTest, DriftReQueuesDoNotCountAgainstLeaseExpiries) {
  const std::string a = Register("phone-a");
  const int64_t base = Submit();
  Lease l = MustLease(a);
  ASSERT_OK(store_->ReportResult(a, base, l.lease_id, WithCanary(10, 1, 1000)).status());
  const int64_t job = Submit();
  for (int i = 0; i < 2; ++i) {
    l = MustLease(a);
    ASSERT_OK(store_->ReportResult(a, job, l.lease_id, WithCanary(20, 1, 2000)).status());
  }
  MustLease(a);  // attempt 3; max_attempts is 2, but only one lease ended in an expiry
  clock_.AdvanceMs(1500);
  ASSERT_OK(store_->ExpireLeases().status());
  ASSERT_OK_AND_ASSIGN(JobRecord j, store_->GetJob(job));
  EXPECT_EQ(j.state, STALE) << j.message;
}

TEST_F(JobStoreTest, AReadingThatIsNotAMeasurementIsRefusedAndNothingChanges) {
  const std::string a = Register("phone-a");
  const int64_t job = Submit();
  Lease l = MustLease(a);
  EXPECT_THAT(store_->ReportResult(a, job, l.lease_id, WithCanary(std::nan(""), 1, 1000)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("canary reading")));
  EXPECT_THAT(store_->ReportResult(a, job, l.lease_id, WithCanary(-3, 1, 1000)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a measurement")));
  ASSERT_OK_AND_ASSIGN(JobRecord j, store_->GetJob(job));
  EXPECT_EQ(j.state, LEASED);
  ASSERT_OK_AND_ASSIGN(std::vector<AgentRecord> agents, store_->ListAgents());
  EXPECT_EQ(agents[0].canaries, 0);
  // The lease is still live: a good report goes through.
  ASSERT_OK_AND_ASSIGN(ReportOutcome o,
                       store_->ReportResult(a, job, l.lease_id, WithCanary(10, 1, 1000)));
  EXPECT_EQ(o, ReportOutcome::kAccepted);
}

}  // namespace
}  // namespace hilnas
