// The two-stage runner end to end on the committed demo backbone: real
// SQLite, real pruning and training, a scripted agent answering benchmark
// jobs through the JobStore protocol (lease, report) with latencies from a
// known function of the architecture.
#include "coordinator/campaign_runner.h"
#include "quality/slurm_evaluator.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/campaign_config.h"
#include "coordinator/campaign_report.h"
#include "coordinator/campaign_service.h"
#include "gmock/gmock.h"
#include "nlohmann/json.hpp"
#include "gtest/gtest.h"
#include "model/checkpoint.h"
#include "quality/tokens.h"
#include "search_space/counts.h"
#include "util/files.h"
#include "util/status_macros.h"
#include "util/status_matchers.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::hilnas::testing::StatusIs;
using ::testing::Contains;
using ::testing::HasSubstr;

class CampaignTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    tokens_ = (dir_ / "tokens.bin").string();
    CorpusManifest manifest;
    auto ids = BuildByteCorpus({"/usr/share/common-licenses"}, &manifest);
    ASSERT_TRUE(ids.ok()) << ids.status();
    ASSERT_OK(WriteTokenFile(tokens_, *ids));
    Open();
  }
  void Open() {
    runner_.reset();
    service_.reset();
    campaigns_.reset();
    jobs_.reset();
    const std::string db = (dir_ / "c.db").string();
    jobs_ = *JobStore::Open(db, &clock_);
    campaigns_ = *CampaignStore::Open(db, &clock_);
    CampaignRunnerOptions o;
    o.work_dir = (dir_ / "work").string();
    o.k_folds = 3;
    // The evaluators a coordinator would define on its command line.
    CampaignPolicy policy;
    policy.evaluators = {{"false", "false {checkpoint} {output}"}, {"scripted", "unused"}};
    runner_ = std::make_unique<CampaignRunner>(
        campaigns_.get(), jobs_.get(), &clock_, o, DefaultBackboneLoader(),
        make_evaluator_ ? make_evaluator_ : DefaultEvaluatorFactory(policy.evaluators));
    service_ =
        std::make_unique<CampaignServiceImpl>(campaigns_.get(), runner_.get(), std::move(policy));
    DeviceIdentity d;
    d.set_name("scripted");
    // A reopened store is a restarted coordinator: the same agent, its key.
    absl::StatusOr<AgentSession> session = jobs_->RegisterAgent(d, session_key_);
    ASSERT_TRUE(session.ok()) << session.status();
    agent_ = session->agent_id;
    session_key_ = session->session_key;
  }

  CampaignConfig Config(const std::string& name) {
    CampaignConfig c;
    c.set_name(name);
    c.set_backbone_checkpoint(std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone");
    EXPECT_OK(ReadTextProtoFile(std::string(HILNAS_SOURCE_DIR) + "/configs/demo-space.textproto",
                                c.mutable_search_space()));
    c.set_tokens(tokens_);
    c.set_ttft_prompt_tokens(64);
    c.mutable_reference()->set_loss(6.0);
    c.set_stage1_latency_points(8);
    c.set_stage1_sobol_points(6);
    c.set_stage1_target_r2(0.9999);  // so stage 1 runs to its budget
    c.set_stage2_trials(6);
    c.set_stage2_initial_points(3);
    c.set_batch_size(3);
    c.set_candidates(60);
    c.set_mc_samples(16);
    c.set_seed(4);
    TrainRecipe* t = c.mutable_train();
    t->set_steps(2);
    t->set_batch_size(2);
    t->set_seq_len(32);
    t->set_eval_windows(4);
    return WithCampaignDefaults(c);
  }

  // Answers every queued job: TTFT grows with prefill FLOPs.
  void ServeJobs() {
    while (true) {
      auto lease = jobs_->LeaseJob(agent_);
      ASSERT_TRUE(lease.ok()) << lease.status();
      if (!lease->has_value()) return;
      const Lease& l = **lease;
      Arch arch = *ArchFromProto(l.request.arch());
      BenchmarkResult r;
      r.mutable_device()->set_name("scripted");
      *r.mutable_request() = l.request;
      const double ms = 2 + PrefillFlops(arch, 64) / 2e7;
      LatencySummary* s = r.add_summaries();
      s->set_prompt_tokens(64);
      s->set_ttft_median_ms(ms);
      s->set_ttft_stderr_ms(0.01 * ms);
      s->set_decode_median_ms_per_token(0.1 * ms);
      ++measured_[ArchKey(l.request.arch())];
      ASSERT_OK(jobs_->ReportResult(agent_, l.job_id, l.lease_id, r).status());
    }
  }

  // Steps until the campaign is no longer running; every `reopen_every`
  // steps the whole coordinator state is dropped and reopened.
  std::string RunToEnd(const std::string& name, int reopen_every = 0) {
    // Evaluations run on the evaluator's threads: a step that changed
    // nothing waits a little. Reopening counts only steps that changed
    // something, so it lands between (and sometimes during) evaluations.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
    for (int step = 1; std::chrono::steady_clock::now() < deadline;) {
      auto p = runner_->Step(name);
      EXPECT_TRUE(p.ok()) << p.status();
      ServeJobs();
      auto r = campaigns_->Get(name);
      if (r->state != CampaignState::kRunning) return std::string(CampaignStateName(r->state));
      if (p.ok() && !*p) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        continue;
      }
      if (reopen_every > 0 && step % reopen_every == 0) Open();
      ++step;
    }
    return "still running";
  }

  // A 4-way cloze task over lines of the licences the campaign trains on
  // (distractors: the line's last word with its letters reversed and
  // shifted); returns the config's path.
  std::string WriteClozeTask() {
    std::ifstream in("/usr/share/common-licenses/GPL-3");
    std::string line, jsonl;
    int n = 0;
    while (std::getline(in, line) && n < 12) {
      const size_t cut = line.rfind(' ');
      if (line.size() < 40 || cut == std::string::npos || cut + 4 > line.size()) continue;
      const std::string context = line.substr(0, cut), word = line.substr(cut);
      std::string reversed(word.rbegin(), word.rend() - 1);
      reversed = " " + reversed;
      std::string shifted = word;
      for (size_t i = 1; i < shifted.size(); ++i) shifted[i] = shifted[i] == 'z' ? 'a' : shifted[i] + 1;
      const nlohmann::json doc = {{"context", context},
                                  {"endings", {word, reversed, shifted, " the"}},
                                  {"label", 0}};
      jsonl += doc.dump() + "\n";
      ++n;
    }
    EXPECT_OK(WriteFileAtomically((dir_ / "cloze.jsonl").string(), jsonl));
    const std::string config = (dir_ / "cloze.textproto").string();
    EXPECT_OK(WriteFileAtomically(config, R"(name: "cloze"
data: "cloze.jsonl"
context: "{{context}}"
choices_field: "endings"
gold_field: "label"
)"));
    return config;
  }

  EvaluatorFactory make_evaluator_;  // empty: the default factory
  std::string session_key_;          // the scripted agent's

  void ExpectCompleteCampaign(const std::string& name) {
    ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, campaigns_->Trials(name));
    std::map<std::string, int> provenance;
    std::set<std::string> keys[3];
    int stage1 = 0, stage2 = 0;
    for (size_t i = 0; i < trials.size(); ++i) {
      const Trial& t = trials[i];
      EXPECT_EQ(t.id(), static_cast<int64_t>(i + 1)) << "gap or reordering";
      EXPECT_TRUE(keys[t.stage()].insert(ArchKey(t.arch())).second) << "duplicate in stage";
      EXPECT_EQ(t.state(), DONE) << t.id() << ": " << t.message();
      ++provenance[absl::StrCat(t.stage(), ":",
                                t.provenance().substr(0, t.provenance().find('/')))];
      if (t.stage() == 1) {
        ++stage1;
        EXPECT_GT(t.measured_ttft_ms(), 0);
        EXPECT_EQ(measured_[ArchKey(t.arch())], 1) << "trial " << t.id() << " measured twice";
      } else {
        ++stage2;
        EXPECT_TRUE(std::isfinite(t.loss()) && t.loss() > 0 && t.loss() < 6);
        EXPECT_GT(t.predicted_ttft_ms(), 0);
      }
    }
    EXPECT_EQ(stage1, 8);
    EXPECT_EQ(stage2, 6);
    EXPECT_EQ(provenance["1:sobol"], 6);
    EXPECT_EQ(provenance["1:uncertainty"], 2);
    EXPECT_EQ(provenance["2:sobol"], 3);
    EXPECT_EQ(provenance["2:qnehvi"], 3);
    ASSERT_OK_AND_ASSIGN(CampaignRecord r, campaigns_->Get(name));
    const FrontView front = ComputeFront(r, trials);
    EXPECT_GT(front.hypervolume, 0);
    EXPECT_GT(r.reference.ttft_ms(), 0);  // the automatic reference was fixed
    EXPECT_FALSE(std::isnan(r.cv_r2));
  }

  fs::path dir_;
  std::string tokens_, agent_;
  SystemClock clock_;
  std::map<std::string, int> measured_;
  std::unique_ptr<JobStore> jobs_;
  std::unique_ptr<CampaignStore> campaigns_;
  std::unique_ptr<CampaignRunner> runner_;
  std::unique_ptr<CampaignServiceImpl> service_;
};

TEST_F(CampaignTest, BothStagesEndInAFrontWithEveryTrialAccountedFor) {
  ASSERT_OK(service_->Create(Config("full")).status());
  ASSERT_OK(service_->Start("full").status());
  EXPECT_EQ(RunToEnd("full"), "done");
  ExpectCompleteCampaign("full");
  ASSERT_OK_AND_ASSIGN(CampaignStatus s, service_->Get("full"));
  EXPECT_EQ(s.trials_done(), 6);
  EXPECT_EQ(s.latency_points(), 8);
  EXPECT_GT(s.front_size(), 0);
  EXPECT_THAT(s.message(), HasSubstr("on the front"));
}

TEST_F(CampaignTest, ReopeningAfterEveryThirdStepLosesAndRepeatsNothing) {
  ASSERT_OK(service_->Create(Config("crashy")).status());
  ASSERT_OK(service_->Start("crashy").status());
  EXPECT_EQ(RunToEnd("crashy", /*reopen_every=*/3), "done");
  ExpectCompleteCampaign("crashy");
  // One benchmark job per stage-1 trial, none submitted twice.
  int jobs = 0;
  while (jobs_->GetJob(jobs + 1).ok()) ++jobs;
  EXPECT_EQ(jobs, 8);
}

TEST_F(CampaignTest, BaselineStrategiesRunThroughTheSamePath) {
  CampaignConfig c = Config("random");
  c.set_strategy("random");
  ASSERT_OK(service_->Create(c).status());
  ASSERT_OK(service_->Start("random").status());
  EXPECT_EQ(RunToEnd("random"), "done");
  ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, campaigns_->Trials("random"));
  int random = 0;
  for (const Trial& t : trials) random += t.stage() == 2 && t.provenance() == "random";
  EXPECT_EQ(random, 6);
}

TEST_F(CampaignTest, ConfirmedTrialsAreMeasuredAndTheGapLogged) {
  CampaignConfig c = Config("confirm");
  c.set_confirm_latency(true);
  ASSERT_OK(service_->Create(c).status());
  ASSERT_OK(service_->Start("confirm").status());
  EXPECT_EQ(RunToEnd("confirm"), "done");
  ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, campaigns_->Trials("confirm"));
  std::set<int64_t> jobs;
  for (const Trial& t : trials) {
    EXPECT_TRUE(jobs.insert(t.job_id()).second) << "trial " << t.id() << " shares a job";
    if (t.stage() != 2) continue;
    EXPECT_EQ(t.state(), DONE);
    EXPECT_GT(t.measured_ttft_ms(), 0) << "trial " << t.id();
    ASSERT_OK_AND_ASSIGN(int reports, jobs_->AcceptedReports(t.job_id()));
    EXPECT_EQ(reports, 1);
  }
  EXPECT_EQ(jobs.size(), trials.size());  // one job per trial of either stage
  ASSERT_OK_AND_ASSIGN(auto log, campaigns_->LogLines("confirm", 100));
  int gaps = 0;
  for (const LogLine& l : log) gaps += l.text.find("vs predicted") != std::string::npos;
  EXPECT_EQ(gaps, 6);
}

TEST_F(CampaignTest, TheKvPredictionChoiceIsSearchedLikeAnyDimension) {
  CampaignConfig c = Config("kvp");
  c.mutable_search_space()->add_aux_choices()->set_none(true);
  c.mutable_search_space()->add_aux_choices()->set_layer_pruned_ratio(0.5);
  c.set_stage2_trials(9);
  ASSERT_OK(service_->Create(c).status());
  ASSERT_OK(service_->Start("kvp").status());
  EXPECT_EQ(RunToEnd("kvp"), "done");
  ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, campaigns_->Trials("kvp"));
  int with_aux[3] = {0, 0, 0};
  for (const Trial& t : trials) {
    EXPECT_EQ(t.state(), DONE) << t.id() << ": " << t.message();
    if (t.arch().has_kv_prediction()) {
      ++with_aux[t.stage()];
      EXPECT_THAT(ArchSummary(t.arch()), HasSubstr("+KVP"));
      if (t.stage() == 2) {
        EXPECT_TRUE(std::isfinite(t.loss()) && t.loss() > 0 && t.loss() < 6);
      }
    }
  }
  EXPECT_GT(with_aux[1], 0);  // measured on the agent with an auxiliary model
  EXPECT_GT(with_aux[2], 0);  // pruned, trained (frozen base) and scored
}

TEST_F(CampaignTest, DecodeAndMemoryJoinTheObjectives) {
  CampaignConfig c = Config("four");
  c.add_objectives(DECODE);
  c.add_objectives(MEMORY);
  // Pipelined decoding as a decoding dimension: candidates carry it to the
  // agents; pruning and training ignore it.
  c.mutable_search_space()->add_ppd_choices();
  PpdChoice* ppd = c.mutable_search_space()->add_ppd_choices();
  ppd->set_k(1);
  ppd->set_layers_from_end(1);
  ppd->set_timing_match_rate(0.8);
  ASSERT_OK(service_->Create(c).status());
  ASSERT_OK(service_->Start("four").status());
  EXPECT_EQ(RunToEnd("four"), "done");
  ExpectCompleteCampaign("four");
  ASSERT_OK_AND_ASSIGN(CampaignRecord r, campaigns_->Get("four"));
  EXPECT_GT(r.reference.decode_ms(), 0);  // the medians of stage 1
  EXPECT_GT(r.reference.memory_mb(), 0);
  ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, campaigns_->Trials("four"));
  const FrontView front = ComputeFront(r, trials);
  EXPECT_EQ(front.objectives.size(), 4u);
  EXPECT_EQ(front.reference.size(), 4u);
  for (const Trial* t : front.evaluated) {
    EXPECT_GT(t->predicted_decode_ms(), 0);
    EXPECT_GT(t->memory_mb(), 0);
  }
  EXPECT_GT(front.hypervolume, 0);
  int with_ppd = 0;
  for (const Trial& t : trials) {
    if (t.arch().ppd().k() == 0) continue;
    ++with_ppd;
    EXPECT_EQ(t.arch().ppd().layer(), t.arch().num_layers() - 1);
    EXPECT_THAT(ArchSummary(t.arch()), HasSubstr("+ppd"));
  }
  EXPECT_GT(with_ppd, 0);
}

TEST_F(CampaignTest, TooManyFailuresStopTheCampaignWithAReport) {
  CampaignConfig c = Config("failing");
  c.set_quality_evaluator("false");
  c.set_max_in_flight(1);  // sequential: the next batch waits for this one's results
  ASSERT_OK(service_->Create(c).status());
  ASSERT_OK(service_->Start("failing").status());
  EXPECT_EQ(RunToEnd("failing"), "failed");
  ASSERT_OK_AND_ASSIGN(CampaignRecord r, campaigns_->Get("failing"));
  EXPECT_THAT(r.message, HasSubstr("3 of 3 stage-2 trials failed"));
  EXPECT_THAT(r.message, HasSubstr("last error"));
  ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, campaigns_->Trials("failing"));
  int failed = 0, abandoned = 0, open = 0;
  for (const Trial& t : trials) {
    failed += t.state() == FAILED;
    abandoned += t.state() == ABANDONED;
    open += !TrialFinished(t.state());
  }
  EXPECT_EQ(failed, 3);
  EXPECT_EQ(open, 0);
  EXPECT_EQ(abandoned, 0);  // the batch was 3; nothing else was proposed
  // Resuming forgives the old failures; the next ones count anew.
  ASSERT_OK(service_->Resume("failing").status());
  EXPECT_EQ(RunToEnd("failing"), "failed");
}

// A fault-injecting evaluator: the loss falls with the pruned model's depth,
// every third call fails.
class ScriptedEvaluator : public QualityEvaluator {
 public:
  explicit ScriptedEvaluator(int* calls) : calls_(calls) {}
  absl::StatusOr<QualityResult> Evaluate(const std::string& checkpoint_dir,
                                         const std::string&) override {
    if (++*calls_ % 3 == 0) return absl::UnavailableError("scripted outage");
    HILNAS_ASSIGN_OR_RETURN(Arch arch, ReadConfigJson(checkpoint_dir + "/config.json"));
    QualityResult q;
    q.loss = 5.0 - 0.1 * arch.num_layers;
    return q;
  }

 private:
  int* calls_;
};

TEST_F(CampaignTest, TheInjectedEvaluatorScoresEveryStageTwoTrial) {
  int calls = 0;
  std::string named;
  make_evaluator_ =
      [&](const CampaignConfig& c,
          const Backbone& backbone) -> absl::StatusOr<std::unique_ptr<TrialEvaluator>> {
    named = c.quality_evaluator();
    EXPECT_GT(backbone.model->arch().num_layers, 0);
    return NewConcurrentEvaluator(std::make_shared<ScriptedEvaluator>(&calls), 1);
  };
  Open();
  CampaignConfig c = Config("injected");
  c.set_quality_evaluator("scripted");
  c.set_max_failed_fraction(0.5);
  ASSERT_OK(service_->Create(c).status());
  ASSERT_OK(service_->Start("injected").status());
  EXPECT_EQ(RunToEnd("injected"), "done");
  EXPECT_EQ(named, "scripted");
  ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, campaigns_->Trials("injected"));
  int done = 0, failed = 0;
  for (const Trial& t : trials) {
    if (t.stage() != 2) continue;
    done += t.state() == DONE;
    failed += t.state() == FAILED;
    if (t.state() == DONE) {
      EXPECT_DOUBLE_EQ(t.loss(), 5.0 - 0.1 * t.arch().num_layers());
    }
    if (t.state() == FAILED) {
      EXPECT_THAT(t.message(), HasSubstr("scripted outage"));
    }
  }
  EXPECT_EQ(done + failed, calls);
  EXPECT_EQ(failed, calls / 3);
  EXPECT_GT(done, 0);
}

// A cluster in memory that outlives the runner (a restarted coordinator
// finds its jobs): each job is PENDING, then RUNNING, then ends as
// `end(task)` says on the following polls.
struct FakeCluster {
  struct Job {
    EvaluationTask task;
    int polls = 0;
    bool cancelled = false;
  };
  std::map<std::string, Job> jobs;       // by id
  std::map<std::string, int> submitted;  // job name -> sbatch calls
  std::function<std::string(const EvaluationTask&)> end = [](const EvaluationTask&) {
    return std::string("COMPLETED");
  };
  int max_running = 0;
  int Running() const {
    int n = 0;
    for (const auto& [id, j] : jobs) n += !j.cancelled && j.polls < 3;
    return n;
  }
};

class FakeClusterEvaluator : public TrialEvaluator {
 public:
  explicit FakeClusterEvaluator(FakeCluster* c) : c_(c) {}
  int max_attempts() const override { return 2; }
  absl::StatusOr<std::string> Submit(const EvaluationTask& task) override {
    const std::string id = absl::StrCat(1000 + c_->jobs.size());
    c_->jobs[id].task = task;
    ++c_->submitted[task.JobName()];
    c_->max_running = std::max(c_->max_running, c_->Running());
    return id;
  }
  absl::StatusOr<std::string> Find(const EvaluationTask& task) override {
    for (const auto& [id, j] : c_->jobs) {
      if (j.task.JobName() == task.JobName()) return id;
    }
    return std::string();
  }
  absl::StatusOr<EvaluationStatus> Poll(const EvaluationTask&, const std::string& id) override {
    FakeCluster::Job& j = c_->jobs.at(id);
    EvaluationStatus s;
    const int n = ++j.polls;
    s.state = j.cancelled ? "CANCELLED" : n == 1 ? "PENDING" : n == 2 ? "RUNNING" : c_->end(j.task);
    s.kind = SlurmStateKind(s.state);
    s.node = "node1";
    if (s.kind == EvaluationStatus::Kind::kDone) {
      absl::StatusOr<Arch> arch = ReadConfigJson(j.task.checkpoint_dir + "/config.json");
      if (!arch.ok()) return arch.status();
      s.result.loss = 5.0 - 0.1 * arch->num_layers;
    } else if (s.kind != EvaluationStatus::Kind::kQueued &&
               s.kind != EvaluationStatus::Kind::kRunning) {
      s.message = absl::StrCat("job ", id, " ended ", s.state);
    }
    return s;
  }
  absl::Status Cancel(const std::string& id) override {
    c_->jobs.at(id).cancelled = true;
    return absl::OkStatus();
  }

 private:
  FakeCluster* c_;
};

TEST_F(CampaignTest, TrialsEvaluateTwoAtATimeRetryReattachAndStopCancels) {
  FakeCluster cluster;
  // Trial 10's first attempt loses its node; trial 12 runs out of time.
  cluster.end = [](const EvaluationTask& t) {
    if (t.trial == 10 && t.attempt == 1) return std::string("NODE_FAIL");
    if (t.trial == 12) return std::string("TIMEOUT");
    return std::string("COMPLETED");
  };
  make_evaluator_ = [&](const CampaignConfig&,
                        const Backbone&) -> absl::StatusOr<std::unique_ptr<TrialEvaluator>> {
    return std::make_unique<FakeClusterEvaluator>(&cluster);
  };
  Open();
  CampaignConfig c = Config("cluster");
  c.set_quality_evaluator("scripted");
  c.set_max_in_flight(2);
  c.set_max_failed_fraction(0.5);
  ASSERT_OK(service_->Create(c).status());
  ASSERT_OK(service_->Start("cluster").status());
  // Run until the first stage-2 job is out, then lose its handle as if the
  // coordinator died between sbatch and the write, and restart.
  bool lost_one = false;
  for (int i = 0; i < 400 && !lost_one; ++i) {
    ASSERT_OK(runner_->Step("cluster").status());
    ServeJobs();
    ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, campaigns_->Trials("cluster"));
    for (Trial& t : trials) {
      if (t.stage() == 2 && t.state() == TRAINING && !t.eval_job().empty()) {
        t.clear_eval_job();
        ASSERT_OK(campaigns_->UpdateTrial(t));
        lost_one = true;
        break;
      }
    }
  }
  ASSERT_TRUE(lost_one);
  Open();
  EXPECT_EQ(RunToEnd("cluster"), "done");
  EXPECT_EQ(cluster.max_running, 2);
  for (const auto& [name, n] : cluster.submitted) EXPECT_EQ(n, 1) << name << " submitted twice";
  EXPECT_EQ(cluster.submitted.count("hilnas-cluster-10-2"), 1u);  // the retry after NODE_FAIL
  EXPECT_EQ(cluster.submitted.count("hilnas-cluster-12-2"), 0u);  // TIMEOUT is not retried
  ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, campaigns_->Trials("cluster"));
  for (const Trial& t : trials) {
    if (t.id() == 12) {
      EXPECT_EQ(t.state(), FAILED);
      EXPECT_THAT(t.message(), HasSubstr("TIMEOUT"));
    } else if (t.stage() == 2) {
      EXPECT_EQ(t.state(), DONE) << t.id() << ": " << t.message();
      EXPECT_GT(t.loss(), 0);
    }
  }
  ASSERT_OK_AND_ASSIGN(std::vector<LogLine> lines, campaigns_->LogLines("cluster", 1000));
  std::vector<std::string> log;
  for (const LogLine& l : lines) log.push_back(l.text);
  EXPECT_THAT(log, Contains(HasSubstr("re-attached")));
  EXPECT_THAT(log, Contains(HasSubstr("NODE_FAIL; trying again")));

  // A stop cancels what is out; a resume submits the next attempts.
  CampaignConfig s = Config("stopping");
  s.set_quality_evaluator("scripted");
  s.set_max_in_flight(2);
  ASSERT_OK(service_->Create(s).status());
  ASSERT_OK(service_->Start("stopping").status());
  auto out = [&] {
    absl::StatusOr<std::vector<Trial>> trials = campaigns_->Trials("stopping");
    int n = 0;
    for (const Trial& t : trials.value()) n += t.state() == TRAINING;
    return n;
  };
  for (int i = 0; i < 400 && out() < 2; ++i) {
    ASSERT_OK(runner_->Step("stopping").status());
    ServeJobs();
  }
  ASSERT_EQ(out(), 2);
  ASSERT_OK(service_->Stop("stopping").status());
  ASSERT_OK(runner_->CancelEvaluations("stopping"));
  EXPECT_EQ(out(), 0);
  int cancelled = 0;
  for (const auto& [id, j] : cluster.jobs)
    cancelled += j.task.campaign == "stopping" && j.cancelled;
  EXPECT_EQ(cancelled, 2);
  ASSERT_OK(service_->Resume("stopping").status());
  EXPECT_EQ(RunToEnd("stopping"), "done");
}

TEST_F(CampaignTest, StopHaltsAndResumeContinues) {
  ASSERT_OK(service_->Create(Config("pausing")).status());
  ASSERT_OK(service_->Start("pausing").status());
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(runner_->Step("pausing").status());
    ServeJobs();
  }
  ASSERT_OK(service_->Stop("pausing").status());
  ASSERT_OK_AND_ASSIGN(auto before, campaigns_->Trials("pausing"));
  ASSERT_OK_AND_ASSIGN(bool progressed, runner_->Step("pausing"));
  EXPECT_FALSE(progressed);
  ASSERT_OK_AND_ASSIGN(auto after, campaigns_->Trials("pausing"));
  EXPECT_EQ(before.size(), after.size());
  EXPECT_THAT(service_->Start("pausing"),
              StatusIs(absl::StatusCode::kFailedPrecondition, ::testing::_));
  ASSERT_OK(service_->Resume("pausing").status());
  EXPECT_EQ(RunToEnd("pausing"), "done");
}

TEST_F(CampaignTest, ConfigErrorsNameTheField) {
  CampaignConfig wide = Config("wide");
  wide.mutable_search_space()->mutable_d_ffn()->set_max(1024);  // the backbone has 768
  EXPECT_THAT(service_->Create(wide),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("search_space"), HasSubstr("cannot be pruned"))));
  CampaignConfig no_tokens = Config("no-tokens");
  no_tokens.set_tokens((dir_ / "missing.bin").string());
  EXPECT_THAT(service_->Create(no_tokens),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tokens: ")));
  CampaignConfig strategy = Config("strategy");
  strategy.set_strategy("grid");
  EXPECT_THAT(service_->Create(strategy),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("strategy")));
  // Q4_0 deployment: a width off the 32-weight block is named.
  CampaignConfig q4 = Config("q4");
  q4.mutable_benchmark()->set_precision(Q4_0);
  q4.mutable_search_space()->set_block_size(16);
  q4.mutable_search_space()->mutable_d_ffn()->Clear();
  q4.mutable_search_space()->mutable_d_ffn()->add_values(128);
  q4.mutable_search_space()->mutable_d_ffn()->add_values(144);
  EXPECT_THAT(service_->Create(q4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("search_space.d_ffn: choice 144 is not a multiple of 32, the "
                                 "block of benchmark.precision Q4_0")));
  CampaignConfig eval = Config("eval-dtype");
  eval.mutable_train()->set_eval_weight_dtype("q3_k");
  EXPECT_THAT(service_->Create(eval),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("train.eval_weight_dtype")));
  CampaignConfig eval_kv = Config("eval-kv");
  eval_kv.mutable_train()->set_eval_kv_dtype("q4_0");
  EXPECT_THAT(service_->Create(eval_kv),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("train.eval_kv_dtype: \"q4_0\" is not one of f32, f16, q8_0")));
  CampaignConfig kv = Config("kv");
  kv.mutable_benchmark()->set_kv_dtype("int4");
  EXPECT_THAT(service_->Create(kv),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kv_dtype \"int4\"")));
  CampaignConfig ref = Config("ref");
  ref.mutable_reference()->set_loss(-1);
  EXPECT_THAT(service_->Create(ref),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("reference.loss")));
  // Tasks: a path an evaluator's shell must not see, a missing config, a
  // quality_task that is none of the tasks' metrics.
  const std::string cloze = WriteClozeTask();
  CampaignConfig shell = Config("shell");
  shell.add_tasks(cloze + ";rm");
  EXPECT_THAT(service_->Create(shell),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("tasks: task config \"" + cloze + ";rm\"")));
  CampaignConfig missing = Config("missing");
  missing.add_tasks((dir_ / "absent.textproto").string());
  EXPECT_THAT(service_->Create(missing),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tasks[0]: ")));
  CampaignConfig unknown = Config("unknown-task");
  unknown.add_tasks(cloze);
  unknown.set_quality_task("cloze/exact_match");
  EXPECT_THAT(service_->Create(unknown),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("quality_task: \"cloze/exact_match\" is none of the campaign's "
                                 "task metrics (cloze/acc, cloze/acc_norm)")));
  ASSERT_OK_AND_ASSIGN(auto all, service_->List());
  EXPECT_TRUE(all.empty());  // nothing was stored
}

// The in-process evaluator scores the campaign's tasks on every trained
// trial; with quality_task, the search ranks candidates by the task's error.
TEST_F(CampaignTest, TasksAreScoredOnEveryTrialAndMayBeTheQualityObjective) {
  CampaignConfig c = Config("tasks");
  c.add_tasks(WriteClozeTask());
  c.set_quality_task("cloze/acc_norm");
  c.set_stage2_trials(4);
  c.set_stage2_initial_points(3);
  ASSERT_OK(service_->Create(c).status());
  ASSERT_OK(service_->Start("tasks").status());
  EXPECT_EQ(RunToEnd("tasks"), "done");
  ASSERT_OK_AND_ASSIGN(std::vector<Trial> trials, campaigns_->Trials("tasks"));
  ASSERT_OK_AND_ASSIGN(CampaignRecord record, campaigns_->Get("tasks"));
  EXPECT_EQ(record.reference.task_error(), 1.0);  // the default bound: any score
  int scored = 0;
  for (const Trial& t : trials) {
    if (t.stage() != 2) continue;
    EXPECT_EQ(t.state(), DONE) << t.message();
    ASSERT_EQ(t.task_scores_size(), 2) << t.id();
    EXPECT_EQ(t.task_scores(0).task(), "cloze");
    EXPECT_EQ(t.task_scores(0).metric(), "acc");
    EXPECT_EQ(t.task_scores(1).metric(), "acc_norm");
    EXPECT_EQ(t.task_scores(1).n(), 12);
    EXPECT_GE(t.task_scores(1).value(), 0);
    EXPECT_LE(t.task_scores(1).value(), 1);
    EXPECT_DOUBLE_EQ(QualityObjective(record.config, t), 1 - t.task_scores(1).value());
    ++scored;
  }
  EXPECT_EQ(scored, 4);
  ASSERT_OK_AND_ASSIGN(std::vector<LogLine> lines, campaigns_->LogLines("tasks", 1000));
  std::vector<std::string> log;
  for (const LogLine& l : lines) log.push_back(l.text);
  EXPECT_THAT(log, Contains(HasSubstr(", cloze acc_norm ")));
  EXPECT_THAT(ParetoTable(record, trials, false), HasSubstr("| cloze acc | cloze acc_norm |"));
}

TEST_F(CampaignTest, AStepThatThrowsFailsTheCampaignWithTheReasonNotTheProcess) {
  make_evaluator_ = [](const CampaignConfig&,
                       const Backbone&) -> absl::StatusOr<std::unique_ptr<TrialEvaluator>> {
    throw std::bad_alloc();  // what mc_samples: 1e9 did before it was refused at create
  };
  Open();
  ASSERT_OK(service_->Create(Config("throws")).status());
  ASSERT_OK(service_->Start("throws").status());
  for (int i = 0; i < 400; ++i) {
    runner_->GuardedStep("throws");
    ServeJobs();
    if (campaigns_->Get("throws")->state != CampaignState::kRunning) break;
  }
  ASSERT_OK_AND_ASSIGN(CampaignRecord r, campaigns_->Get("throws"));
  EXPECT_EQ(r.state, CampaignState::kFailed);
  EXPECT_THAT(r.message, HasSubstr("a runner step threw: std::bad_alloc"));
  // Failed is at rest: a restarted coordinator does not pick it up again.
  Open();
  EXPECT_FALSE(runner_->GuardedStep("throws"));
  EXPECT_EQ(campaigns_->Get("throws")->state, CampaignState::kFailed);
}

TEST_F(CampaignTest, ACampaignWhoseStepsKeepKillingTheProcessIsFailedOnRestart) {
  ASSERT_OK(service_->Create(Config("killer")).status());
  ASSERT_OK(service_->Start("killer").status());
  // Two steps began and never ended: the process died in each.
  ASSERT_OK(campaigns_->BeginStep("killer").status());
  Open();
  ASSERT_OK_AND_ASSIGN(int crashes, campaigns_->BeginStep("killer"));
  EXPECT_EQ(crashes, 1);
  Open();
  EXPECT_TRUE(runner_->GuardedStep("killer"));
  ASSERT_OK_AND_ASSIGN(CampaignRecord r, campaigns_->Get("killer"));
  EXPECT_EQ(r.state, CampaignState::kFailed);
  EXPECT_THAT(r.message, HasSubstr("died 2 times in a row during a step"));
  // Resume gives it another chance, with the count reset.
  ASSERT_OK(service_->Resume("killer").status());
  EXPECT_TRUE(runner_->GuardedStep("killer"));
  EXPECT_EQ(campaigns_->Get("killer")->state, CampaignState::kRunning);
}

TEST_F(CampaignTest, StopWinsOverARunningCampaign) {
  ASSERT_OK(service_->Create(Config("stoppable")).status());
  ASSERT_OK(service_->Start("stoppable").status());
  ASSERT_TRUE(runner_->GuardedStep("stoppable"));
  ASSERT_OK(service_->Stop("stoppable").status());
  EXPECT_FALSE(runner_->GuardedStep("stoppable"));
  EXPECT_EQ(campaigns_->Get("stoppable")->state, CampaignState::kStopped);
}

TEST_F(CampaignTest, PoisonBudgetsAreRefusedAtCreateNamingTheField) {
  CampaignConfig draws = Config("draws");
  draws.set_mc_samples(1'000'000'000);
  EXPECT_THAT(service_->Create(draws),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("mc_samples")));
  CampaignConfig candidates = Config("candidates");
  candidates.set_candidates(1'000'000'000);
  EXPECT_THAT(service_->Create(candidates),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("candidates: 1000000000 exceeds 1000000")));
  // Each bound alone is fine, their product is not: the memory estimate.
  CampaignConfig product = Config("product");
  product.set_mc_samples(65'536);
  product.set_candidates(1'000'000);
  EXPECT_THAT(service_->Create(product),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("GiB of posterior draws")));
  CampaignConfig steps = Config("steps");
  steps.mutable_train()->set_steps(2'000'000'000);
  EXPECT_THAT(service_->Create(steps),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("train.steps")));
  ASSERT_OK_AND_ASSIGN(auto all, service_->List());
  EXPECT_TRUE(all.empty());
}

TEST_F(CampaignTest, AConfigCarryingACommandIsRefusedNamingQualityEvaluator) {
  CampaignConfig c = Config("attack");
  c.set_quality_evaluator("sh -c 'id > /tmp/x' {checkpoint} {output}");
  EXPECT_THAT(service_->Create(c),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("quality_evaluator"),
                                        HasSubstr("not an evaluator this coordinator defines"))));
  c.set_quality_evaluator("undefined-name");
  EXPECT_THAT(service_->Create(c),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("quality_evaluator")));
  ASSERT_OK_AND_ASSIGN(auto all, service_->List());
  EXPECT_TRUE(all.empty());
}

TEST_F(CampaignTest, PathsOutsideTheDataRootsAreRefusedAtCreate) {
  const fs::path root = dir_ / "root";
  fs::create_directories(root);
  fs::copy(std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone", root / "backbone",
           fs::copy_options::recursive);
  fs::copy_file(tokens_, root / "tokens.bin");
  fs::create_directory_symlink(std::string(HILNAS_SOURCE_DIR) + "/data/demo-backbone",
                               root / "escape");
  CampaignPolicy policy;
  ASSERT_OK_AND_ASSIGN(policy.data_roots, DataRoots::Make({root.string()}));
  CampaignServiceImpl service(campaigns_.get(), runner_.get(), policy);

  CampaignConfig inside = Config("inside");
  inside.set_backbone_checkpoint((root / "backbone").string());
  inside.set_backbone_metrics((root / "backbone" / "metrics.json").string());
  inside.set_tokens((root / "tokens.bin").string());
  EXPECT_OK(service.Create(inside).status());

  CampaignConfig outside = inside;
  outside.set_name("outside");
  outside.set_tokens(tokens_);
  EXPECT_THAT(service.Create(outside),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("tokens: "), HasSubstr("outside"))));
  CampaignConfig dotdot = inside;
  dotdot.set_name("dotdot");
  dotdot.set_tokens((root / ".." / "tokens.bin").string());
  EXPECT_THAT(service.Create(dotdot),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("\"..\"")));
  CampaignConfig link = inside;
  link.set_name("link");
  link.set_backbone_checkpoint((root / "escape").string());
  link.set_backbone_metrics((root / "escape" / "metrics.json").string());
  EXPECT_THAT(service.Create(link), StatusIs(absl::StatusCode::kInvalidArgument,
                                             ::testing::AllOf(HasSubstr("backbone_checkpoint"),
                                                              HasSubstr("resolves to"))));
  // A task config outside, and one inside whose data is outside.
  const std::string cloze = WriteClozeTask();  // in dir_, outside the root
  CampaignConfig task_outside = inside;
  task_outside.set_name("task-outside");
  task_outside.add_tasks(cloze);
  EXPECT_THAT(service.Create(task_outside),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("tasks[0]: "), HasSubstr("outside"))));
  ASSERT_OK(WriteFileAtomically((root / "cloze.textproto").string(),
                                "name: \"cloze\" data: \"../cloze.jsonl\" context: \"{{context}}\" "
                                "choices_field: \"endings\" gold_field: \"label\"\n"));
  CampaignConfig data_outside = inside;
  data_outside.set_name("data-outside");
  data_outside.add_tasks((root / "cloze.textproto").string());
  EXPECT_THAT(service.Create(data_outside),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("tasks[0] data: "), HasSubstr("\"..\""))));
  ASSERT_OK_AND_ASSIGN(auto all, service.List());
  EXPECT_EQ(all.size(), 1u);
}

}  // namespace
}  // namespace hilnas
