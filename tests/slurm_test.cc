// Stage 2 on a real Slurm: scripts/slurm-cluster brings up munged, MariaDB,
// slurmdbd, slurmctld and slurmd (Debian's packages) under a temporary
// folder; a real coordinator process runs campaigns whose quality evaluator
// is `--evaluator gpu=slurm:FILE`, a real agent measures stage 1's latency,
// and each trial is one sbatch job running `hilnas train --result_json`.
//   - two trials run at once (both RUNNING in squeue);
//   - the coordinator is SIGKILLed while jobs run and restarted: every
//     stage-2 trial is evaluated exactly once (sacct records per job name);
//   - a job scancel'ed from outside is retried as attempt 2;
//   - a job past its time limit ends as a failed trial that names TIMEOUT;
//   - `campaign stop` leaves no job of the campaign in squeue.
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <map>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "coordinator/campaign_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "quality/slurm_evaluator.h"
#include "tests/process.h"
#include "tests/tiny_job.h"
#include "util/status_matchers.h"
#include "util/subprocess.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::hilnas::testing::HilnasBinary;
using ::hilnas::testing::kTinyCampaignSpace;
using ::hilnas::testing::Process;
using ::hilnas::testing::WaitFor;
using ::testing::HasSubstr;

// One cluster per test process (ctest runs the tests of this file as
// separate processes, maybe at once).
std::string Dir() { return absl::StrCat(::testing::TempDir(), "/hilnas_slurm_", getpid()); }
std::string SlurmDir() { return Dir() + "/slurm"; }

class SlurmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    fs::remove_all(Dir());
    fs::create_directories(Dir());
    absl::StatusOr<CommandOutput> up = RunProgram(
        {"bash", std::string(HILNAS_SOURCE_DIR) + "/scripts/slurm-cluster", "start", SlurmDir()},
        180);
    // A failed start fails every test (gtest would report them skipped).
    if (!up.ok()) *cluster_error_ = up.status().ToString();
    // The token file every job trains on.
    auto corpus = hilnas::testing::RunHilnas(
        "corpus --sources=/usr/share/common-licenses --out=" + Dir() + "/tokens.bin");
    if (corpus.exit_code != 0) *cluster_error_ = "hilnas corpus failed: " + corpus.output;
  }
  static void TearDownTestSuite() {
    RunProgram(
        {"bash", std::string(HILNAS_SOURCE_DIR) + "/scripts/slurm-cluster", "stop", SlurmDir()},
        120)
        .IgnoreError();
    std::error_code ec;
    fs::remove_all(Dir(), ec);
  }

  void SetUp() override {
    ASSERT_TRUE(cluster_error_->empty()) << "the Slurm cluster did not start: " << *cluster_error_;
    dir_ = Dir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/shared");
    db_ = dir_ + "/c.db";
  }

  // Slurm's own commands, against the test's cluster.
  static std::string Slurm(const std::vector<std::string>& argv) {
    absl::StatusOr<CommandOutput> out =
        RunProgram(argv, 60, {{"SLURM_CONF", SlurmDir() + "/slurm.conf"}});
    return out.ok() ? out->out : "";
  }
  // name -> state of this campaign's jobs that squeue shows.
  std::map<std::string, std::string> Queue(const std::string& campaign) {
    std::map<std::string, std::string> jobs;
    for (absl::string_view line :
         absl::StrSplit(Slurm({"squeue", "-h", "-o", "%j|%T"}), '\n', absl::SkipWhitespace())) {
      std::vector<std::string> f = absl::StrSplit(line, '|');
      if (f.size() == 2 && absl::StartsWith(f[0], "hilnas-" + campaign + "-")) jobs[f[0]] = f[1];
    }
    return jobs;
  }
  // Every accounting record of this campaign's jobs: (name, state).
  std::vector<std::pair<std::string, std::string>> Accounting(const std::string& campaign) {
    std::vector<std::pair<std::string, std::string>> out;
    for (absl::string_view line : absl::StrSplit(
             Slurm({"sacct", "-n", "-P", "-X", "-S", "2000-01-01", "-o", "JobName,State"}), '\n',
             absl::SkipWhitespace())) {
      std::vector<std::string> f = absl::StrSplit(line, '|');
      if (f.size() == 2 && absl::StartsWith(f[0], "hilnas-" + campaign + "-")) {
        out.emplace_back(f[0], f[1]);
      }
    }
    return out;
  }

  // The evaluator's file: the job trains the pruned checkpoint on CPU with
  // `hilnas train` and writes the loss where the coordinator reads it.
  std::string WriteSlurmConfig(const std::string& prelude, int time_limit_minutes) {
    const std::string path = dir_ + "/slurm-eval.textproto";
    SlurmEvaluatorConfigText(path, prelude, time_limit_minutes);
    return path;
  }
  void SlurmEvaluatorConfigText(const std::string& path, const std::string& prelude, int minutes) {
    const std::string script = absl::StrCat(
        prelude, HilnasBinary(), " train --ckpt {checkpoint} --tokens ", Dir(),
        "/tokens.bin --out {workdir}/trained --overwrite --steps 4 --batch_size 2 --seq_len 32 "
        "--threads 1 --result_json {output}{task_flags}");
    std::string text =
        absl::StrCat("shared_dir: \"", dir_, "/shared\"\n", "slurm_conf: \"", SlurmDir(),
                     "/slurm.conf\"\n", "cpus_per_task: 1\n", "time_limit_minutes: ", minutes, "\n",
                     "poll_seconds: 0.5\nmax_poll_seconds: 2\nmax_attempts: 3\n", "script: \"",
                     absl::CEscape(script), "\"\n");
    ASSERT_OK(WriteFileAtomically(path, text));
  }

  void WriteCampaign(const std::string& name, int stage2_trials) {
    ASSERT_OK(WriteFileAtomically(dir_ + "/campaign.textproto",
                                  absl::StrCat(R"(name: ")", name,
                                               R"("
backbone_checkpoint: ")",
                                               HILNAS_SOURCE_DIR,
                                               R"(/data/demo-backbone"
quality_evaluator: "gpu"
)",
                                               kTinyCampaignSpace, R"(ttft_prompt_tokens: 32
reference { loss: 6.0 }
stage1_latency_points: 4 stage1_sobol_points: 4 stage1_target_r2: 0.0
stage2_initial_points: 2 batch_size: 2 max_in_flight: 2 max_failed_fraction: 0.5
stage2_trials: )",
                                               stage2_trials, R"(
candidates: 40 mc_samples: 16 seed: 5
benchmark { warmup_runs: 0 repeats: 1 max_repeats: 1 decode_tokens: 2 threads: 1 }
)")));
  }

  std::unique_ptr<Process> StartCoordinator(const std::string& slurm_config) {
    const std::string port_file = dir_ + "/port";
    fs::remove(port_file);
    auto p = std::make_unique<Process>(
        std::vector<std::string>{"coordinator", absl::StrCat("--listen=127.0.0.1:", port_),
                                 "--db=" + db_, "--port_file=" + port_file,
                                 "--work_dir=" + dir_ + "/work",
                                 "--evaluator=gpu=slurm:" + slurm_config},
        dir_ + "/coordinator.log");
    std::string text;
    EXPECT_TRUE(
        WaitFor([&] { return ReadFileToString(port_file, &text).ok() && !text.empty(); }, 60))
        << p->Log();
    EXPECT_TRUE(absl::SimpleAtoi(text, &port_)) << text;
    return p;
  }
  std::string Address() const { return absl::StrCat("--coordinator=127.0.0.1:", port_); }

  void CreateAndStart(const std::string& name) {
    auto r = hilnas::testing::RunHilnas(
        absl::StrCat("campaign create ", Address(), " --config=", dir_, "/campaign.textproto"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = hilnas::testing::RunHilnas(absl::StrCat("campaign start ", name, " ", Address()));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }

  std::vector<Trial> Trials(const std::string& name) {
    SystemClock clock;
    auto store = CampaignStore::Open(db_, &clock);
    if (!store.ok()) return {};
    return (*store)->Trials(name).value_or(std::vector<Trial>{});
  }
  std::string State(const std::string& name) {
    SystemClock clock;
    auto store = CampaignStore::Open(db_, &clock);
    if (!store.ok()) return "";
    auto r = (*store)->Get(name);
    return r.ok() ? std::string(CampaignStateName(r->state)) : "";
  }

  static inline std::string* cluster_error_ = new std::string;
  std::string dir_, db_;
  int port_ = 0;
};

TEST_F(SlurmTest, TwoAtOnceAndAKilledCoordinatorEvaluatesEachTrialOnce) {
  // Each job holds its slot a few seconds so the two overlap and the kill
  // lands while they run.
  const std::string slurm = WriteSlurmConfig("sleep 4; ", 10);
  WriteCampaign("onceeach", 6);
  auto coordinator = StartCoordinator(slurm);
  Process agent({"agent", Address(), "--name=a1", "--threads=1", "--cooldown_ms=0",
                 "--max_foreign_cores=0", "--canary=false"},
                dir_ + "/agent.log");
  CreateAndStart("onceeach");

  auto running = [&] {
    int n = 0;
    for (const auto& [name, state] : Queue("onceeach")) n += state == "RUNNING";
    return n;
  };
  ASSERT_TRUE(WaitFor([&] { return running() == 2; }, 240)) << coordinator->Log();
  coordinator->Signal(SIGKILL);
  coordinator->Wait();
  std::fprintf(stderr, "killed the coordinator with 2 jobs running\n");
  coordinator = StartCoordinator(slurm);
  ASSERT_TRUE(WaitFor([&] { return State("onceeach") != "running"; }, 300)) << coordinator->Log();
  ASSERT_EQ(State("onceeach"), "done") << coordinator->Log();

  std::map<std::string, int> records;
  for (const auto& [name, state] : Accounting("onceeach")) {
    EXPECT_EQ(state, "COMPLETED") << name;
    ++records[name];
  }
  int stage2 = 0;
  for (const Trial& t : Trials("onceeach")) {
    if (t.stage() != 2) continue;
    ++stage2;
    EXPECT_EQ(t.state(), DONE) << t.id() << ": " << t.message();
    EXPECT_GT(t.loss(), 0);
    EXPECT_EQ(t.eval_attempt(), 1);
    EXPECT_EQ(records[absl::StrCat("hilnas-onceeach-", t.id(), "-1")], 1) << "trial " << t.id();
  }
  EXPECT_EQ(stage2, 6);
  EXPECT_EQ(records.size(), 6u) << "a job other than one per trial was submitted";
  // What a restart between sbatch and the write relies on: the evaluator
  // finds each trial's job by its name, in squeue or in sacct.
  ASSERT_OK_AND_ASSIGN(SlurmEvaluatorConfig config, ReadSlurmEvaluatorConfig(slurm));
  std::unique_ptr<TrialEvaluator> evaluator = NewSlurmEvaluator(config);
  for (const Trial& t : Trials("onceeach")) {
    if (t.stage() != 2) continue;
    EvaluationTask task;
    task.campaign = "onceeach";
    task.trial = t.id();
    task.attempt = 1;
    ASSERT_OK_AND_ASSIGN(std::string found, evaluator->Find(task));
    EXPECT_EQ(found, t.eval_job()) << "trial " << t.id();
    task.attempt = 2;
    ASSERT_OK_AND_ASSIGN(found, evaluator->Find(task));
    EXPECT_EQ(found, "") << "no second attempt was submitted for trial " << t.id();
  }
  auto status = hilnas::testing::RunHilnas("campaign status onceeach " + Address());
  EXPECT_THAT(status.output, HasSubstr("stage 2: 6 of 6 trials (6 done"));

  // Task scores of the front on the cluster: `pareto report` submits one
  // job per front candidate through the same evaluator, its script gets
  // {task_flags}, and the scores come back in the job's output file.
  ASSERT_OK(WriteFileAtomically(dir_ + "/cloze.jsonl", R"({"context": "This program is free", "endings": [" software", " erawtfos"], "label": 0}
{"context": "WITHOUT ANY", "endings": [" WARRANTY", " YTNARRAW"], "label": 0}
{"context": "GNU General Public", "endings": [" License", " esneciL"], "label": 0}
)"));
  ASSERT_OK(WriteFileAtomically(dir_ + "/cloze.textproto",
                                "name: \"cloze\" data: \"cloze.jsonl\" context: \"{{context}}\" "
                                "choices_field: \"endings\" gold_field: \"label\"\n"));
  auto report = hilnas::testing::RunHilnas(
      absl::StrCat("pareto report onceeach --db=", db_, " --task=", dir_, "/cloze.textproto",
                   " --evaluator=gpu=slurm:", slurm));
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_THAT(report.output, HasSubstr("| cloze acc | cloze acc_norm | front |"));
  int front_scored = 0;
  for (const Trial& t : Trials("onceeach")) {
    if (t.task_scores_size() == 0) continue;
    ++front_scored;
    EXPECT_EQ(t.task_scores(0).n(), 3);
  }
  EXPECT_GE(front_scored, 1);
  int report_jobs = 0;
  for (const auto& [name, state] : Accounting("onceeach-report")) {
    EXPECT_EQ(state, "COMPLETED") << name;
    ++report_jobs;
  }
  EXPECT_EQ(report_jobs, front_scored);
}

TEST_F(SlurmTest, ScancelIsRetriedTimeoutFailsAndStopCancelsEverything) {
  // Stage 2's trials are 5, 6, ...: 5's first attempt waits to be
  // cancelled from outside, 6 outlives its one-minute limit, the rest take
  // long enough that a stop finds jobs running.
  const std::string slurm = WriteSlurmConfig(
      "if [ {trial} = 5 ] && [ {attempt} = 1 ]; then sleep 300; fi; "
      "if [ {trial} = 6 ]; then sleep 600; fi; sleep 20; ",
      1);
  WriteCampaign("faults", 8);
  auto coordinator = StartCoordinator(slurm);
  Process agent({"agent", Address(), "--name=a1", "--threads=1", "--cooldown_ms=0",
                 "--max_foreign_cores=0", "--canary=false"},
                dir_ + "/agent.log");
  CreateAndStart("faults");

  ASSERT_TRUE(WaitFor([&] { return Queue("faults")["hilnas-faults-5-1"] == "RUNNING"; }, 240))
      << coordinator->Log();
  Slurm({"scancel", "--name=hilnas-faults-5-1"});
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const Trial& t : Trials("faults")) {
          if (t.id() == 5) return t.eval_attempt() == 2;
        }
        return false;
      },
      60))
      << coordinator->Log();

  // Slurm checks limits periodically: TIMEOUT comes 30-60 s after the minute.
  ASSERT_TRUE(WaitFor(
      [&] {
        for (const Trial& t : Trials("faults")) {
          if (t.id() == 6) return t.state() == FAILED;
        }
        return false;
      },
      240))
      << coordinator->Log();
  for (const Trial& t : Trials("faults")) {
    if (t.id() == 6) {
      EXPECT_THAT(t.message(), HasSubstr("TIMEOUT"));
    }
  }

  ASSERT_TRUE(WaitFor([&] { return !Queue("faults").empty(); }, 120)) << coordinator->Log();
  // What is out shows with its job id, state and node.
  EXPECT_TRUE(WaitFor(
      [&] {
        return hilnas::testing::RunHilnas("campaign status faults " + Address())
                   .output.find("RUNNING on ") != std::string::npos;
      },
      60));
  auto r = hilnas::testing::RunHilnas("campaign stop faults " + Address());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(WaitFor([&] { return Queue("faults").empty(); }, 60))
      << "still queued after stop: " << Queue("faults").size() << "\n"
      << coordinator->Log();
  for (const Trial& t : Trials("faults")) {
    EXPECT_NE(t.state(), TRAINING) << "trial " << t.id() << " still evaluating after stop";
  }
  // The retried trial 5 ran twice: once cancelled from outside, once to the end.
  int five = 0;
  for (const auto& [name, state] : Accounting("faults")) {
    if (absl::StartsWith(name, "hilnas-faults-5-")) ++five;
    if (name == "hilnas-faults-5-1") {
      EXPECT_THAT(state, HasSubstr("CANCELLED"));
    }
    if (name == "hilnas-faults-6-1") {
      EXPECT_EQ(state, "TIMEOUT");
    }
  }
  EXPECT_GE(five, 2);
}

}  // namespace
}  // namespace hilnas
