#include "util/subprocess.h"

#include <fcntl.h>
#include <malloc.h>
#include <omp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/cpu_caches.h"
#include "util/status_macros.h"

namespace hilnas {
namespace {

std::string Tail(const std::string& s, size_t n = 400) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

// The largest VmHWM (peak resident memory since exec) among the processes
// of process group `pgid`: a command and everything it started. Read from
// /proc while they run: wait4's ru_maxrss would count the forked child's
// copy of this process's memory from before its exec.
int64_t GroupPeakRssBytes(pid_t pgid) {
  int64_t peak = 0;
  std::error_code ec;
  // A child not yet past its exec is still this binary, with a copy of this
  // process's memory: not the command's.
  static const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
    std::ifstream stat(entry.path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid pgrp ...: comm may hold spaces, so read after ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    long long ppid = 0, pgrp = 0;
    if (!(rest >> state >> ppid >> pgrp) || pgrp != pgid) continue;
    if (std::filesystem::read_symlink(entry.path() / "exe", ec) == self) continue;
    std::ifstream status(entry.path() / "status");
    while (std::getline(status, line)) {
      if (line.rfind("VmHWM:", 0) == 0) {
        peak = std::max<int64_t>(peak, std::atoll(line.c_str() + 6) * 1024);
        break;
      }
    }
  }
  return peak;
}

// This process's environment with `env`'s entries replacing or added.
std::vector<std::string> EnvironmentWith(const std::map<std::string, std::string>& env) {
  std::vector<std::string> all;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    if (!env.count(kv.substr(0, kv.find('=')))) all.push_back(kv);
  }
  for (const auto& [key, value] : env) all.push_back(key + "=" + value);
  return all;
}

// Reads the child's stdout and stderr into `result` until both close or
// `timeout_s` passes, sampling the process group's peak memory; closes
// both descriptors. On a timeout the group is killed and true returned.
bool ReadOutput(pid_t pid, int out_fd, int err_fd, double timeout_s, CommandOutput* result) {
  pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
  std::string* sinks[2] = {&result->out, &result->err};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int open_fds = 2;
  bool timed_out = false;
  auto sample_every = std::chrono::milliseconds(5);
  auto next_sample = std::chrono::steady_clock::now() + std::chrono::milliseconds(10);
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    // Memory is sampled while the command runs, at 10 ms and then ever less
    // often (at most every 500 ms: a /proc scan must not disturb the timings
    // it runs beside). VmHWM keeps each process's peak, so only processes
    // ending between two samples are missed.
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_sample) {
      result->peak_rss_bytes = std::max(result->peak_rss_bytes, GroupPeakRssBytes(pid));
      sample_every = std::min(sample_every * 2, std::chrono::milliseconds(500));
      next_sample = now + sample_every;
    }
    const int64_t until_sample =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_sample - now).count();
    if (poll(fds, 2, static_cast<int>(std::clamp<int64_t>(std::min(left, until_sample), 1, 1000))) <
            0 &&
        errno != EINTR) {
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n > 0) {
        sinks[i]->append(buf, n);
      } else {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  if (timed_out) kill(-pid, SIGKILL);
  for (pollfd& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  return timed_out;
}

}  // namespace

// The POSIX shell: /bin/sh, or Android's /system/bin/sh where the agent
// bundle runs on a phone (Android has no /bin).
static const std::string& Shell() {
  static const std::string shell =
      access("/bin/sh", X_OK) == 0 || access("/system/bin/sh", X_OK) != 0 ? "/bin/sh"
                                                                          : "/system/bin/sh";
  return shell;
}

absl::StatusOr<CommandOutput> RunCapturing(const std::string& command, double timeout_s) {
  return RunProgram({Shell(), "-c", command}, timeout_s);
}

absl::StatusOr<CommandOutput> RunProgram(const std::vector<std::string>& args, double timeout_s,
                                         const std::map<std::string, std::string>& env) {
  if (args.empty()) return absl::InvalidArgumentError("RunProgram: no program");
  // Shown in errors: the shell's command itself, or the program's words.
  const std::string command = args[0] == Shell() && args.size() == 3 && args[1] == "-c"
                                  ? args[2]
                                  : absl::StrJoin(args, " ");
  std::vector<std::string> all = args;  // execvp wants char*, built before fork
  std::vector<char*> argv;
  for (std::string& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  // The environment too: after fork only async-signal-safe calls are allowed.
  std::vector<std::string> env_all = EnvironmentWith(env);
  std::vector<char*> envp;
  for (std::string& e : env_all) envp.push_back(e.data());
  envp.push_back(nullptr);
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) return absl::InternalError("pipe() failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork() failed");
  if (pid == 0) {
    setpgid(0, 0);  // own process group, so a timeout kills adb and its children too
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    // Only 1 and 2 may reach the pipes: a daemon the command leaves behind
    // (scripts/slurm-cluster) must not hold them open, or the read never ends.
    close(out_pipe[0]);
    close(err_pipe[0]);
    close(out_pipe[1]);
    close(err_pipe[1]);
    execvpe(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  CommandOutput result;
  const bool timed_out = ReadOutput(pid, out_pipe[0], err_pipe[0], timeout_s, &result);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("command timed out after ", timeout_s, " s: ", command));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return absl::InternalError(
        absl::StrCat("command exited with ", code, ": ", command, "\nstderr: ", Tail(result.err)));
  }
  return result;
}

absl::StatusOr<std::string> ExpandCommand(const std::string& tmpl,
                                          const std::map<std::string, std::string>& values) {
  auto is_name = [](const std::string& key) {
    if (key.empty()) return false;
    for (char c : key) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
    }
    return true;
  };
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    const size_t close = tmpl[i] == '{' ? tmpl.find('}', i) : std::string::npos;
    const std::string key = close == std::string::npos ? "" : tmpl.substr(i + 1, close - i - 1);
    if (!is_name(key)) {  // not a placeholder: JSON or shell braces pass through
      out += tmpl[i++];
      continue;
    }
    auto it = values.find(key);
    if (it == values.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("command \"", tmpl, "\": unknown placeholder {", key, "}"));
    }
    out += it->second;
    i = close + 1;
  }
  return out;
}

absl::StatusOr<std::string> RunShellCommand(const std::string& command, double timeout_s) {
  HILNAS_ASSIGN_OR_RETURN(CommandOutput out, RunCapturing(command, timeout_s));
  return out.out;
}

pid_t SpawnProcess(const std::string& binary, const std::vector<std::string>& args,
                   const std::string& log, bool append_log) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (!log.empty()) {
      const int fd =
          open(log.c_str(), O_WRONLY | O_CREAT | (append_log ? O_APPEND : O_TRUNC), 0644);
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<std::string> all = {binary};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

bool KeepFreedMemory() {
#if defined(__GLIBC__)
  // M_MMAP_MAX 0: no block is mapped on its own (the heap grows instead;
  // glibc still maps when it cannot). M_TRIM_THRESHOLD at its largest: the
  // heap's top is never given back. Setting either also stops glibc's
  // moving thresholds.
  return mallopt(M_MMAP_MAX, 0) == 1 && mallopt(M_TRIM_THRESHOLD, INT_MAX) == 1;
#else
  return false;
#endif
}

std::string CurrentCpuList() { return FormatCpuList(AffinityCpus()); }

std::string FewerCpusThanThreads(int threads) {
  const std::vector<int> cpus = AffinityCpus();
  if (cpus.empty() || static_cast<int>(cpus.size()) >= threads) return "";
  return absl::StrCat(threads, " threads on ", cpus.size(), " CPUs (", FormatCpuList(cpus),
                      "): they take turns, and the timings are those of fewer cores than "
                      "--threads says");
}

std::string UndoOpenMpStartupBinding() {
  const int places = omp_get_num_places();
  if (omp_get_proc_bind() == omp_proc_bind_false || places <= 0) return "";
  std::vector<int> cpus;  // every place's, ascending, each once
  for (int p = 0; p < places; ++p) {
    std::vector<int> ids(static_cast<size_t>(std::max(0, omp_get_place_num_procs(p))));
    if (!ids.empty()) omp_get_place_proc_ids(p, ids.data());
    for (int id : ids) {
      if (id >= 0 && id < CPU_SETSIZE) cpus.push_back(id);
    }
  }
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c : cpus) CPU_SET(c, &all);
  if (cpus.empty() || sched_setaffinity(0, sizeof(all), &all) != 0) return "";
  return FormatCpuList(cpus);
}

void ReexecWithTimingThreads(char** argv, int threads, bool reexec_anyway) {
  KeepFreedMemory();  // for this process, in case it goes on without execv
  if (const std::string cpus = UndoOpenMpStartupBinding(); !cpus.empty()) {
    std::fprintf(stderr,
                 "hilnas: OpenMP's thread binding (OMP_PROC_BIND=%s, OMP_PLACES=%s, "
                 "GOMP_CPU_AFFINITY=%s) is off for this timing: it pinned the program's first "
                 "thread, and every thread started after it, to one CPU. Threads run on CPUs %s; "
                 "choose CPUs with taskset or an agent's --cpu-set\n",
                 std::getenv("OMP_PROC_BIND") ? std::getenv("OMP_PROC_BIND") : "(unset)",
                 std::getenv("OMP_PLACES") ? std::getenv("OMP_PLACES") : "(unset)",
                 std::getenv("GOMP_CPU_AFFINITY") ? std::getenv("GOMP_CPU_AFFINITY") : "(unset)",
                 cpus.c_str());
    setenv("OMP_PROC_BIND", "false", 1);
    unsetenv("OMP_PLACES");
    unsetenv("GOMP_CPU_AFFINITY");
    reexec_anyway = true;  // libgomp reads them at start-up
  }
  if (std::getenv("OMP_WAIT_POLICY") != nullptr && !reexec_anyway) return;
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  setenv("GOMP_SPINCOUNT", "10000", 0);
  setenv("OPENBLAS_THREAD_TIMEOUT", "20", 0);
  if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr && threads > 0) {
    setenv("OPENBLAS_NUM_THREADS", absl::StrCat(threads).c_str(), 1);
  }
  std::fflush(nullptr);
  execv("/proc/self/exe", argv);  // on failure, carry on with the default policy
}

}  // namespace hilnas
