// A real coordinator process with a real agent runs a small two-stage
// campaign and is killed with SIGKILL three times (stage 1 with latency jobs
// out, twice in stage 2 while a trial is being pruned or trained) and
// started again each time. The finished campaign must have trials numbered
// 1..N with no gap, no architecture twice in a stage, one benchmark job per
// latency trial reported once. Then the inspection commands run on the
// finished campaign: pareto show/export/plot, export --trial, latency eval.
#include <signal.h>

#include <filesystem>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "coordinator/campaign_store.h"
#include "coordinator/job_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "search_space/arch.h"
#include "quality/trial_evaluator.h"
#include "tests/process.h"
#include "tests/tiny_job.h"
#include "util/status_matchers.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::hilnas::testing::kTinyCampaignSpace;
using ::hilnas::testing::Process;
using ::hilnas::testing::WaitFor;
using ::testing::HasSubstr;

class CampaignCrashTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/hilnas_campaign_crash";
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = dir_ + "/c.db";
  }

  // Runs `hilnas args...` to completion; returns (exit code, output).
  std::pair<int, std::string> Run(const std::vector<std::string>& args) {
    const std::string log = dir_ + "/run.log";
    fs::remove(log);
    Process p(args, log);
    const int rc = p.Wait();
    return {rc, p.Log()};
  }

  std::unique_ptr<Process> StartCoordinator() {
    const std::string port_file = dir_ + "/port";
    fs::remove(port_file);
    auto p = std::make_unique<Process>(
        std::vector<std::string>{"coordinator", absl::StrCat("--listen=127.0.0.1:", port_),
                                 "--db=" + db_, "--port_file=" + port_file, "--lease_ttl_ms=2000",
                                 "--heartbeat_ms=300"},
        dir_ + "/coordinator.log");
    std::string text;
    EXPECT_TRUE(
        WaitFor([&] { return ReadFileToString(port_file, &text).ok() && !text.empty(); }, 60))
        << p->Log();
    EXPECT_TRUE(absl::SimpleAtoi(text, &port_)) << text;
    return p;
  }

  std::vector<Trial> Trials() {
    SystemClock clock;
    auto store = CampaignStore::Open(db_, &clock);
    if (!store.ok()) return {};
    return (*store)->Trials("crash").value_or(std::vector<Trial>{});
  }
  int Count(int stage, TrialState state) {
    int n = 0;
    for (const Trial& t : Trials()) n += t.stage() == stage && t.state() == state;
    return n;
  }
  std::string State() {
    SystemClock clock;
    auto store = CampaignStore::Open(db_, &clock);
    if (!store.ok()) return "";
    auto r = (*store)->Get("crash");
    return r.ok() ? std::string(CampaignStateName(r->state)) : "";
  }

  std::string dir_, db_;
  int port_ = 0;
};

TEST_F(CampaignCrashTest, ThreeKillsLoseAndRepeatNothing) {
  auto [rc, out] =
      Run({"corpus", "--sources=/usr/share/common-licenses", "--out=" + dir_ + "/tokens.bin"});
  ASSERT_EQ(rc, 0) << out;
  const std::string config = dir_ + "/crash.textproto";
  ASSERT_OK(WriteFileAtomically(config, absl::StrCat(R"(name: "crash"
backbone_checkpoint: ")",
                                                     HILNAS_SOURCE_DIR, R"(/data/demo-backbone"
tokens: ")",
                                                     dir_, R"(/tokens.bin"
)",
                                                     kTinyCampaignSpace, R"(ttft_prompt_tokens: 64
reference { loss: 6.0 }
stage1_latency_points: 8 stage1_sobol_points: 6 stage1_target_r2: 0.9999
stage2_trials: 10 stage2_initial_points: 4 batch_size: 2
candidates: 60 mc_samples: 16 seed: 3
benchmark { warmup_runs: 0 repeats: 1 max_repeats: 1 decode_tokens: 2 threads: 1 }
train { steps: 4 batch_size: 4 seq_len: 64 eval_windows: 8 }
)")));
  auto coordinator = StartCoordinator();
  const std::string address = absl::StrCat("--coordinator=127.0.0.1:", port_);
  Process agent({"agent", address, "--name=a1", "--threads=1", "--cooldown_ms=0",
                 "--max_foreign_cores=0", "--canary=false"},
                dir_ + "/agent.log");
  std::tie(rc, out) = Run({"campaign", "create", address, "--config=" + config});
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = Run({"campaign", "start", "crash", address});
  ASSERT_EQ(rc, 0) << out;

  auto kill_and_restart = [&](const char* when) {
    coordinator->Signal(SIGKILL);
    coordinator->Wait();
    std::fprintf(stderr, "killed the coordinator %s\n", when);
    coordinator = StartCoordinator();
  };
  // 1: stage 1 with jobs out and some measured.
  ASSERT_TRUE(WaitFor([&] { return Count(1, DONE) >= 1 && Count(1, MEASURING) >= 1; }, 120))
      << coordinator->Log();
  kill_and_restart("in stage 1");
  // 2 and 3: stage 2 in the middle of a trial.
  auto mid_trial = [&](int done_before) {
    return WaitFor(
        [&] {
          return Count(2, DONE) >= done_before && (Count(2, PRUNING) + Count(2, TRAINING)) > 0;
        },
        180);
  };
  ASSERT_TRUE(mid_trial(0)) << coordinator->Log();
  kill_and_restart("while pruning or training the first stage-2 trials");
  ASSERT_TRUE(mid_trial(5)) << coordinator->Log();
  kill_and_restart("while pruning or training a qNEHVI trial");
  ASSERT_TRUE(WaitFor([&] { return State() == "done" || State() == "failed"; }, 240))
      << coordinator->Log();
  ASSERT_EQ(State(), "done") << coordinator->Log();

  const std::vector<Trial> trials = Trials();
  std::set<std::string> keys[3];
  int stage2 = 0, stage1 = 0;
  SystemClock clock;
  auto jobs = JobStore::Open(db_, &clock);
  ASSERT_TRUE(jobs.ok());
  for (size_t i = 0; i < trials.size(); ++i) {
    const Trial& t = trials[i];
    EXPECT_EQ(t.id(), static_cast<int64_t>(i + 1));
    EXPECT_TRUE(keys[t.stage()].insert(ArchKey(t.arch())).second) << "trial " << t.id();
    EXPECT_EQ(t.state(), DONE) << t.id() << " " << t.message();
    if (t.stage() == 1) {
      ++stage1;
      auto accepted = (*jobs)->AcceptedReports(t.job_id());
      ASSERT_TRUE(accepted.ok());
      EXPECT_EQ(*accepted, 1) << "trial " << t.id();
    } else {
      ++stage2;
    }
  }
  EXPECT_EQ(stage2, 10);
  EXPECT_GE(stage1, 8);
  int job_count = 0;
  while ((*jobs)->GetJob(job_count + 1).ok()) ++job_count;
  EXPECT_EQ(job_count, stage1) << "a latency job was submitted twice";

  // Inspecting the finished campaign, with the coordinator stopped.
  coordinator->Signal(SIGTERM);
  coordinator->Wait();
  std::tie(rc, out) = Run({"pareto", "show", "crash", "--db=" + db_});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("on the front"));
  std::tie(rc, out) = Run(
      {"pareto", "export", "crash", "--db=" + db_, "--format=csv", "--out=" + dir_ + "/front.csv"});
  EXPECT_EQ(rc, 0) << out;
  std::string csv;
  ASSERT_OK(ReadFileToString(dir_ + "/front.csv", &csv));
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 11) << csv;  // header + 10 trials
  std::tie(rc, out) = Run({"pareto", "export", "crash", "--db=" + db_, "--format=json"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("\"hypervolume\""));
  std::tie(rc, out) = Run({"pareto", "plot", "crash", "--db=" + db_, "--out=" + dir_ + "/f.svg"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_TRUE(fs::file_size(dir_ + "/f.svg") > 1000);
  const int64_t last = trials.back().id();
  std::tie(rc, out) = Run({"export", "--db=" + db_, "--campaign=crash",
                           absl::StrCat("--trial=", last), "--out=" + dir_ + "/export"});
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = Run({"checkpoint", "check", dir_ + "/export"});
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) =
      Run({"export", "--db=" + db_, "--campaign=crash", "--trial=999", "--out=" + dir_ + "/nope"});
  EXPECT_NE(rc, 0);
  EXPECT_THAT(out, HasSubstr("has no trial 999"));
  std::tie(rc, out) = Run({"pareto", "show", "crash", "--db=" + dir_ + "/missing.db"});
  EXPECT_NE(rc, 0);
  EXPECT_THAT(out, HasSubstr("does not exist"));
  std::tie(rc, out) = Run({"latency", "eval", "--campaign=crash", "--db=" + db_, "--folds=3"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("GP (cross-validated)"));
  std::tie(rc, out) =
      Run({"latency", "fit", "--campaign=crash", "--db=" + db_, "--out=" + dir_ + "/ttft.model"});
  EXPECT_EQ(rc, 0) << out;

  // Downstream tasks on the front's candidates, trained again by the
  // campaign's own (in-process) evaluator; the scores are kept with the
  // trials and become columns of the table and the CSV.
  const std::string cloze = dir_ + "/cloze.textproto";
  ASSERT_OK(WriteFileAtomically(dir_ + "/cloze.jsonl", R"({"context": "This program is free", "endings": [" software", " erawtfos", " tpguxbsf"], "label": 0}
{"context": "either version 3 of the", "endings": [" License", " esneciL", " Mjdfotf"], "label": 0}
{"context": "WITHOUT ANY", "endings": [" WARRANTY", " YTNARRAW", " XBSSBOUZ"], "label": 0}
{"context": "GNU General Public", "endings": [" License", " esneciL", " Mjdfotf"], "label": 0}
{"context": "along with this", "endings": [" program", " margorp", " qsphsbn"], "label": 0}
{"context": "Copyright (C) 2007 Free Software", "endings": [" Foundation", " noitadnuoF", " Gpvoebujpo"], "label": 0}
)"));
  ASSERT_OK(WriteFileAtomically(cloze, R"(name: "cloze"
data: "cloze.jsonl"
context: "{{context}}"
choices_field: "endings"
gold_field: "label"
)"));
  std::tie(rc, out) = Run({"pareto", "report", "crash", "--db=" + db_, "--task=" + cloze,
                           "--work-dir=" + dir_ + "/report", "--out=" + dir_ + "/report.csv"});
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("| cloze acc | cloze acc_norm | front |"));
  // The CSV: the front's rows have both scores, the others none.
  std::string report_csv;
  ASSERT_OK(ReadFileToString(dir_ + "/report.csv", &report_csv));
  std::vector<std::string> rows = absl::StrSplit(report_csv, '\n', absl::SkipEmpty());
  ASSERT_GE(rows.size(), 2u);
  EXPECT_THAT(rows[0], HasSubstr(",on_front,"));
  EXPECT_THAT(rows[0], HasSubstr(",cloze:acc,cloze:acc:stderr,cloze:acc_norm,"));
  const std::vector<std::string> head = absl::StrSplit(rows[0], ',');
  const size_t on_front = std::find(head.begin(), head.end(), "on_front") - head.begin();
  const size_t acc = std::find(head.begin(), head.end(), "cloze:acc") - head.begin();
  int front = 0;
  for (size_t r = 1; r < rows.size(); ++r) {
    const std::vector<std::string> f = absl::StrSplit(rows[r], ',');
    ASSERT_EQ(f.size(), head.size()) << rows[r];
    front += f[on_front] == "1";
    EXPECT_EQ(f[on_front] == "1", !f[acc].empty()) << rows[r];
  }
  EXPECT_GE(front, 1);
  for (const Trial& t : Trials()) {
    if (t.task_scores_size() > 0) {
      EXPECT_EQ(t.task_scores(0).n(), 6);
    }
  }
  std::tie(rc, out) = Run({"pareto", "show", "crash", "--db=" + db_});
  EXPECT_THAT(out, HasSubstr("cloze acc_norm"));
  std::tie(rc, out) = Run({"pareto", "report", "crash", "--db=" + db_,
                           "--task=" + dir_ + "/nope.textproto"});
  EXPECT_NE(rc, 0);
  EXPECT_THAT(out, HasSubstr("nope.textproto"));
  // What an external or Slurm evaluator's {task_flags} runs: `hilnas train
  // --task` scores the trained checkpoint into its result file.
  std::tie(rc, out) =
      Run({"train", "--ckpt=" + dir_ + "/export", "--tokens=" + dir_ + "/tokens.bin",
           "--out=" + dir_ + "/trained", "--steps=2", "--batch-size=2", "--seq-len=32",
           "--task=" + cloze, "--task-limit=4", "--task-weight-dtype=f16",
           "--result-json=" + dir_ + "/result.json"});
  ASSERT_EQ(rc, 0) << out;
  ASSERT_OK_AND_ASSIGN(QualityResult q, ReadQualityJson(dir_ + "/result.json"));
  ASSERT_EQ(q.tasks.size(), 2u);
  EXPECT_EQ(q.tasks[0].task, "cloze");
  EXPECT_EQ(q.tasks[0].n, 4);
}

}  // namespace
}  // namespace hilnas
