#include "quality/trial_evaluator.h"

#include <cmath>
#include <limits>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "nlohmann/json.hpp"
#include "util/textproto.h"

namespace hilnas {

std::string EvaluationTask::JobName() const {
  return absl::StrCat("hilnas-", campaign, "-", trial, "-", attempt);
}

absl::StatusOr<QualityResult> ReadQualityJson(const std::string& path) {
  std::string text;
  if (absl::Status s = ReadFileToString(path, &text); !s.ok()) {
    return absl::NotFoundError(absl::StrCat("no result in ", path, ": ", s.message()));
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("loss") || !j["loss"].is_number() ||
      !std::isfinite(j["loss"].get<double>())) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": want a JSON object with a finite number \"loss\", got: ", text.substr(0, 200)));
  }
  auto number = [&](const char* key, double fallback) {
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
  };
  QualityResult q;
  q.loss = j["loss"].get<double>();
  q.initial_loss = number("initial_loss", std::numeric_limits<double>::quiet_NaN());
  q.tokens = static_cast<int64_t>(number("tokens", 0));
  q.seconds = number("seconds", 0);
  if (j.contains("tasks")) {
    const nlohmann::json& tasks = j["tasks"];
    if (!tasks.is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": \"tasks\" is not an array"));
    }
    for (size_t i = 0; i < tasks.size(); ++i) {
      const nlohmann::json& e = tasks[i];
      auto bad = [&](const std::string& why) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tasks[", i, "]: ", why, ": ", e.dump().substr(0, 200)));
      };
      if (!e.is_object()) return bad("not an object");
      for (const char* key : {"task", "metric"}) {
        if (!e.contains(key) || !e[key].is_string() || e[key].get<std::string>().empty()) {
          return bad(absl::StrCat("\"", key, "\" is not a non-empty string"));
        }
      }
      if (!e.contains("value") || !e["value"].is_number()) return bad("\"value\" is not a number");
      TaskScoreValue v;
      v.task = e["task"].get<std::string>();
      v.metric = e["metric"].get<std::string>();
      v.value = e["value"].get<double>();
      if (!(v.value >= 0 && v.value <= 1)) return bad("\"value\" is not in [0, 1]");
      if (e.contains("stderr") && e["stderr"].is_number()) v.stderr_ = e["stderr"].get<double>();
      if (e.contains("n") && e["n"].is_number_integer()) v.n = e["n"].get<int64_t>();
      q.tasks.push_back(std::move(v));
    }
  }
  return q;
}

namespace {

class ConcurrentEvaluator : public TrialEvaluator {
 public:
  ConcurrentEvaluator(std::shared_ptr<QualityEvaluator> evaluator, int capacity)
      : evaluator_(std::move(evaluator)), capacity_(capacity) {}

  ~ConcurrentEvaluator() override {
    std::vector<std::shared_ptr<Run>> all;
    {
      absl::MutexLock lock(&mu_);
      for (auto& [handle, run] : runs_) all.push_back(run);
      all.insert(all.end(), cancelled_.begin(), cancelled_.end());
    }
    for (auto& run : all) {
      if (run->thread.joinable()) run->thread.join();
    }
  }

  int capacity() const override { return capacity_; }

  absl::StatusOr<std::string> Submit(const EvaluationTask& task) override {
    absl::MutexLock lock(&mu_);
    if (capacity_ > 0 && static_cast<int>(runs_.size()) >= capacity_) {
      return absl::ResourceExhaustedError(
          absl::StrCat("all ", capacity_, " evaluation slots of this coordinator are busy"));
    }
    const std::string handle = absl::StrCat("local-", next_++);
    auto run = std::make_shared<Run>();
    runs_[handle] = run;
    run->thread = std::thread([this, run, task] {
      absl::StatusOr<QualityResult> r = evaluator_->Evaluate(task.checkpoint_dir, task.work_dir);
      absl::MutexLock lock(&mu_);
      run->result = std::move(r);
      run->done = true;
    });
    return handle;
  }

  absl::StatusOr<std::string> Find(const EvaluationTask&) override { return std::string(); }

  absl::StatusOr<EvaluationStatus> Poll(const EvaluationTask&, const std::string& handle) override {
    std::shared_ptr<Run> run;
    EvaluationStatus s;
    {
      absl::MutexLock lock(&mu_);
      auto it = runs_.find(handle);
      if (it == runs_.end()) {
        s.kind = EvaluationStatus::Kind::kLost;
        s.state = "LOST";
        s.message = absl::StrCat(handle, " is not running in this coordinator process");
        return s;
      }
      s.node = "coordinator";
      if (!it->second->done) {
        s.kind = EvaluationStatus::Kind::kRunning;
        s.state = "RUNNING";
        return s;
      }
      run = it->second;
      runs_.erase(it);
    }
    run->thread.join();  // it has finished; the join is immediate
    if (run->result.ok()) {
      s.kind = EvaluationStatus::Kind::kDone;
      s.state = "COMPLETED";
      s.result = *run->result;
    } else {
      s.kind = EvaluationStatus::Kind::kFailed;
      s.state = "FAILED";
      s.message = std::string(run->result.status().message());
    }
    return s;
  }

  absl::Status Cancel(const std::string& handle) override {
    // A thread cannot be stopped from outside: its result is dropped, and it
    // is joined when it ends or with the evaluator.
    absl::MutexLock lock(&mu_);
    auto it = runs_.find(handle);
    if (it == runs_.end()) return absl::OkStatus();
    cancelled_.push_back(it->second);
    runs_.erase(it);
    return absl::OkStatus();
  }

 private:
  struct Run {
    std::thread thread;
    bool done = false;
    absl::StatusOr<QualityResult> result = absl::UnknownError("not finished");
  };

  const std::shared_ptr<QualityEvaluator> evaluator_;
  const int capacity_;
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Run>> runs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<Run>> cancelled_ ABSL_GUARDED_BY(mu_);
  int64_t next_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace

std::unique_ptr<TrialEvaluator> NewConcurrentEvaluator(std::shared_ptr<QualityEvaluator> evaluator,
                                                       int capacity) {
  return std::make_unique<ConcurrentEvaluator>(std::move(evaluator), capacity);
}

}  // namespace hilnas
