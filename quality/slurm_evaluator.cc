#include "quality/slurm_evaluator.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "util/status_macros.h"
#include "util/subprocess.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using Kind = EvaluationStatus::Kind;

constexpr double kCommandTimeoutS = 60;  // one sbatch/squeue/sacct/scancel call
// A job neither squeue nor sacct knows yet (accounting lags) counts as
// pending this long after submission, then as vanished (retried).
constexpr double kUnknownGraceS = 120;
// Placeholders' values go into a bash script unquoted: they may hold only
// these characters (campaign names and paths under shared_dir do).
bool SafeWord(const std::string& s) {
  for (char c : s) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) &&
        std::string("._/+-=,:@").find(c) == std::string::npos) {
      return false;
    }
  }
  return !s.empty();
}

std::string Tail(const std::string& path, size_t n = 1200) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return "(no log at " + path + ")";
  const std::streamoff size = f.tellg();
  const std::streamoff from = size > static_cast<std::streamoff>(n) ? size - n : 0;
  f.seekg(from);
  std::string s(static_cast<size_t>(size - from), '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  return std::string(absl::StripTrailingAsciiWhitespace((from > 0 ? "..." : "") + s));
}

std::string FirstWord(absl::string_view s) {
  s = absl::StripAsciiWhitespace(s);
  return std::string(s.substr(0, s.find(' ')));
}

}  // namespace

absl::Status ValidateSlurmEvaluatorConfig(const SlurmEvaluatorConfig& c, const std::string& where) {
  auto bad = [&](const std::string& field, const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", field, " ", why));
  };
  if (c.shared_dir().empty()) {
    return bad("shared_dir", "is empty: name a folder the coordinator and the nodes both see");
  }
  if (!fs::path(c.shared_dir()).is_absolute()) {
    return bad("shared_dir", absl::StrCat("\"", c.shared_dir(), "\" must be an absolute path"));
  }
  if (!SafeWord(c.shared_dir())) {
    return bad("shared_dir", absl::StrCat("\"", c.shared_dir(),
                                          "\" may hold only letters, digits and ._/+-=,:@"));
  }
  if (c.script().empty()) return bad("script", "is empty");
  if (c.script().find("{output}") == std::string::npos) {
    return bad("script", "never mentions {output}, where the job must write {\"loss\": ...}");
  }
  for (const auto& [field, word] :
       {std::pair<const char*, const std::string*>{"partition", &c.partition()},
        {"account", &c.account()},
        {"gres", &c.gres()}}) {
    if (!word->empty() && !SafeWord(*word)) {
      return bad(field, absl::StrCat("\"", *word, "\" is not a Slurm name"));
    }
  }
  if (c.cpus_per_task() < 0 || c.cpus_per_task() > 4096) {
    return bad("cpus_per_task", absl::StrCat(c.cpus_per_task(), " is outside 0..4096"));
  }
  if (c.mem_mb() < 0) return bad("mem_mb", absl::StrCat(c.mem_mb(), " is negative"));
  if (c.time_limit_minutes() < 0 || c.time_limit_minutes() > 60 * 24 * 365) {
    return bad("time_limit_minutes", absl::StrCat(c.time_limit_minutes(), " is outside 0..525600"));
  }
  if (c.max_attempts() < 1 || c.max_attempts() > 100) {
    return bad("max_attempts", absl::StrCat(c.max_attempts(), " is outside 1..100"));
  }
  if (!(c.poll_seconds() > 0) || !(c.max_poll_seconds() >= c.poll_seconds()) ||
      c.max_poll_seconds() > 3600) {
    return bad("poll_seconds",
               absl::StrCat("want 0 < poll_seconds (", c.poll_seconds(), ") <= max_poll_seconds (",
                            c.max_poll_seconds(), ") <= 3600"));
  }
  for (const std::string& a : c.sbatch_args()) {
    if (a.rfind("--", 0) != 0 || a.find('\n') != std::string::npos) {
      return bad("sbatch_args", absl::StrCat("\"", a, "\" is not a --long-option"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<SlurmEvaluatorConfig> ReadSlurmEvaluatorConfig(const std::string& path) {
  SlurmEvaluatorConfig c;
  HILNAS_RETURN_IF_ERROR(ReadTextProtoFile(path, &c));
  if (c.max_attempts() == 0) c.set_max_attempts(3);
  if (c.poll_seconds() == 0) c.set_poll_seconds(2);
  if (c.max_poll_seconds() == 0) c.set_max_poll_seconds(std::max(30.0, c.poll_seconds()));
  HILNAS_RETURN_IF_ERROR(ValidateSlurmEvaluatorConfig(c, path));
  return c;
}

EvaluationStatus::Kind SlurmStateKind(const std::string& state) {
  const std::string s = FirstWord(state);
  if (s == "RUNNING" || s == "COMPLETING" || s == "STAGE_OUT" || s == "SIGNALING") {
    return Kind::kRunning;
  }
  if (s == "COMPLETED") return Kind::kDone;
  if (s == "TIMEOUT" || s == "OUT_OF_MEMORY" || s == "DEADLINE") return Kind::kFailed;
  if (s == "FAILED" || s == "NODE_FAIL" || s == "PREEMPTED" || s == "BOOT_FAIL" ||
      s == "CANCELLED" || s == "REVOKED" || s == "SPECIAL_EXIT") {
    return Kind::kRetry;
  }
  // PENDING, CONFIGURING, REQUEUED, REQUEUE_HOLD, REQUEUE_FED, RESIZING,
  // SUSPENDED, STOPPED, RESV_DEL_HOLD: not ended, not running.
  return Kind::kQueued;
}

absl::StatusOr<std::string> ParseSbatchOutput(const std::string& out) {
  const std::string line = std::string(absl::StripAsciiWhitespace(out));
  const std::string id = line.substr(0, line.find(';'));
  int64_t n = 0;
  if (id.empty() || !absl::SimpleAtoi(id, &n) || n <= 0) {
    return absl::InternalError(
        absl::StrCat("sbatch --parsable printed \"", line.substr(0, 200), "\", not a job id"));
  }
  return id;
}

std::vector<std::string> SbatchArgs(const SlurmEvaluatorConfig& c, const EvaluationTask& task,
                                    const std::string& script_path) {
  std::vector<std::string> a = {
      "--parsable",
      "--job-name=" + task.JobName(),
      "--output=" + (fs::path(task.work_dir) / "job.log").string(),
      "--chdir=" + task.work_dir,
      // Not the coordinator's environment: it may hold tokens (docs/security.md).
      "--export=PATH,HOME,LANG,LD_LIBRARY_PATH",
  };
  if (!c.partition().empty()) a.push_back("--partition=" + c.partition());
  if (!c.account().empty()) a.push_back("--account=" + c.account());
  if (!c.gres().empty()) a.push_back("--gres=" + c.gres());
  if (c.cpus_per_task() > 0) a.push_back(absl::StrCat("--cpus-per-task=", c.cpus_per_task()));
  if (c.mem_mb() > 0) a.push_back(absl::StrCat("--mem=", c.mem_mb()));
  if (c.time_limit_minutes() > 0) a.push_back(absl::StrCat("--time=", c.time_limit_minutes()));
  for (const std::string& extra : c.sbatch_args()) a.push_back(extra);
  a.push_back(script_path);
  return a;
}

namespace {

class SlurmEvaluator : public TrialEvaluator {
 public:
  SlurmEvaluator(SlurmEvaluatorConfig c, std::string task_flags)
      : c_(std::move(c)), task_flags_(std::move(task_flags)) {
    if (!c_.slurm_conf().empty()) env_["SLURM_CONF"] = c_.slurm_conf();
  }

  std::string work_root() const override { return c_.shared_dir(); }
  int max_attempts() const override { return c_.max_attempts(); }

  absl::StatusOr<std::string> Submit(const EvaluationTask& task) override {
    HILNAS_ASSIGN_OR_RETURN(std::string body, ExpandScript(task));
    std::error_code ec;
    fs::create_directories(task.work_dir, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat("cannot create ", task.work_dir, ": ", ec.message()));
    }
    fs::remove(Output(task), ec);  // a stale result must not pass for this attempt's
    const std::string script = (fs::path(task.work_dir) / "job.sh").string();
    {
      std::ofstream f(script, std::ios::trunc);
      f << "#!/bin/bash\n# " << task.JobName() << ", written by the hilnas coordinator\n"
        << "set -euo pipefail\n"
        << body << "\n";
      if (!f.flush()) return absl::InternalError(absl::StrCat("cannot write ", script));
    }
    std::vector<std::string> argv = {Bin("sbatch")};
    for (std::string& a : SbatchArgs(c_, task, script)) argv.push_back(std::move(a));
    HILNAS_ASSIGN_OR_RETURN(CommandOutput out, RunProgram(argv, kCommandTimeoutS, env_));
    HILNAS_ASSIGN_OR_RETURN(std::string id, ParseSbatchOutput(out.out));
    absl::MutexLock lock(&mu_);
    Tracked& t = tracked_[id];
    t.submitted = Now();
    return id;
  }

  absl::StatusOr<std::string> Find(const EvaluationTask& task) override {
    const std::string name = task.JobName();
    std::string best;
    auto consider = [&](absl::string_view line) {
      const std::string id = FirstWord(line);
      int64_t n = 0, b = 0;
      if (absl::SimpleAtoi(id, &n) && (best.empty() || (absl::SimpleAtoi(best, &b) && n > b))) {
        best = id;
      }
    };
    absl::StatusOr<CommandOutput> q = RunProgram(
        {Bin("squeue"), "-h", "-t", "all", "--name=" + name, "-o", "%i"}, kCommandTimeoutS, env_);
    if (q.ok()) {
      for (absl::string_view line : absl::StrSplit(q->out, '\n', absl::SkipWhitespace())) {
        consider(line);
      }
    }
    if (best.empty()) {
      HILNAS_ASSIGN_OR_RETURN(CommandOutput a,
                              RunProgram({Bin("sacct"), "-n", "-P", "-X", "-S", "2000-01-01",
                                          "--name=" + name, "-o", "JobID"},
                                         kCommandTimeoutS, env_));
      for (absl::string_view line : absl::StrSplit(a.out, '\n', absl::SkipWhitespace())) {
        consider(line);
      }
    }
    return best;
  }

  absl::StatusOr<EvaluationStatus> Poll(const EvaluationTask& task,
                                        const std::string& handle) override {
    const double now = Now();
    {
      absl::MutexLock lock(&mu_);
      Tracked& t = tracked_[handle];
      if (t.submitted == 0) t.submitted = now;  // re-attached after a restart
      if (t.looked && now < t.next_poll) return t.last;
    }
    HILNAS_ASSIGN_OR_RETURN(auto state_node, Query(handle));
    auto [state, node] = state_node;
    EvaluationStatus s;
    s.state = state;
    s.node = node;
    if (state.empty()) {
      absl::MutexLock lock(&mu_);
      if (now - tracked_[handle].submitted < kUnknownGraceS) {
        s.state = "PENDING";
        s.kind = Kind::kQueued;
      } else {
        s.state = "VANISHED";
        s.kind = Kind::kRetry;
        s.message = absl::StrCat("Slurm job ", handle, " (", task.JobName(),
                                 ") is known to neither squeue nor sacct");
      }
    } else {
      s.kind = SlurmStateKind(state);
    }
    if (s.kind == Kind::kDone) {
      absl::StatusOr<QualityResult> r = ReadQualityJson(Output(task));
      if (r.ok()) {
        s.result = *r;
      } else {
        s.kind = Kind::kFailed;
        s.message = absl::StrCat("Slurm job ", handle, " completed but ", r.status().message(),
                                 "; log ", Log(task), ":\n", Tail(Log(task)));
      }
    } else if (s.kind == Kind::kRetry || s.kind == Kind::kFailed) {
      if (s.message.empty()) {
        s.message =
            absl::StrCat("Slurm job ", handle, " ended ", state, node.empty() ? "" : " on " + node,
                         "; log ", Log(task), ":\n", Tail(Log(task)));
      }
    }
    absl::MutexLock lock(&mu_);
    Tracked& t = tracked_[handle];
    const bool changed = !t.looked || t.last.state != s.state;
    t.interval = changed ? c_.poll_seconds() : std::min(2 * t.interval, c_.max_poll_seconds());
    t.next_poll = now + t.interval;
    t.looked = true;
    t.last = s;
    if (s.kind == Kind::kDone || s.kind == Kind::kRetry || s.kind == Kind::kFailed) {
      tracked_.erase(handle);
    }
    return s;
  }

  absl::Status Cancel(const std::string& handle) override {
    HILNAS_RETURN_IF_ERROR(RunProgram({Bin("scancel"), handle}, kCommandTimeoutS, env_).status());
    absl::MutexLock lock(&mu_);
    tracked_.erase(handle);
    return absl::OkStatus();
  }

 private:
  struct Tracked {
    double submitted = 0;
    double next_poll = 0;
    double interval = 0;
    bool looked = false;
    EvaluationStatus last;
  };

  static double Now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  std::string Bin(const std::string& name) const {
    return c_.bin_dir().empty() ? name : (fs::path(c_.bin_dir()) / name).string();
  }
  static std::string Output(const EvaluationTask& task) {
    return (fs::path(task.work_dir) / "quality.json").string();
  }
  static std::string Log(const EvaluationTask& task) {
    return (fs::path(task.work_dir) / "job.log").string();
  }

  absl::StatusOr<std::string> ExpandScript(const EvaluationTask& task) const {
    const std::map<std::string, std::string> values = {
        {"checkpoint", task.checkpoint_dir},     {"output", Output(task)},
        {"trial", absl::StrCat(task.trial)},     {"campaign", task.campaign},
        {"attempt", absl::StrCat(task.attempt)}, {"workdir", task.work_dir}};
    for (const auto& [key, value] : values) {
      if (!SafeWord(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Slurm evaluator: {", key, "} would be \"", value,
                         "\", which holds characters a batch script must not see unquoted"));
      }
    }
    std::map<std::string, std::string> all = values;
    all["task_flags"] = task_flags_;  // checked word by word where it was made
    return ExpandCommand(c_.script(), all);
  }

  // The job's state and node: squeue while slurmctld remembers the job
  // (MinJobAge), then sacct. Both empty when neither knows it.
  absl::StatusOr<std::pair<std::string, std::string>> Query(const std::string& id) {
    absl::StatusOr<CommandOutput> q = RunProgram(
        {Bin("squeue"), "-h", "-t", "all", "-j", id, "-o", "%T|%N"}, kCommandTimeoutS, env_);
    if (q.ok()) {
      const std::string line = std::string(absl::StripAsciiWhitespace(q->out));
      if (!line.empty()) {
        std::vector<std::string> f = absl::StrSplit(line.substr(0, line.find('\n')), '|');
        if (!f.empty()) return std::make_pair(FirstWord(f[0]), f.size() > 1 ? f[1] : "");
      }
    }
    HILNAS_ASSIGN_OR_RETURN(
        CommandOutput a, RunProgram({Bin("sacct"), "-n", "-P", "-X", "-S", "2000-01-01", "-j", id,
                                     "-o", "State,NodeList"},
                                    kCommandTimeoutS, env_));
    for (absl::string_view line : absl::StrSplit(a.out, '\n', absl::SkipWhitespace())) {
      std::vector<std::string> f = absl::StrSplit(line, '|');
      if (f.empty() || f[0].empty()) continue;
      std::string node = f.size() > 1 ? f[1] : "";
      if (node == "None assigned") node.clear();
      return std::make_pair(FirstWord(f[0]), node);
    }
    return std::make_pair(std::string(), std::string());
  }

  const SlurmEvaluatorConfig c_;
  const std::string task_flags_;
  std::map<std::string, std::string> env_;
  absl::Mutex mu_;
  std::map<std::string, Tracked> tracked_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

std::unique_ptr<TrialEvaluator> NewSlurmEvaluator(SlurmEvaluatorConfig config,
                                                  std::string task_flags) {
  return std::make_unique<SlurmEvaluator>(std::move(config), std::move(task_flags));
}

}  // namespace hilnas
