// Child processes for multi-process tests: start the real `hilnas` binary
// with arguments, send it signals, wait for it, read what it logged.
#ifndef HILNAS_TESTS_PROCESS_H_
#define HILNAS_TESTS_PROCESS_H_

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "util/subprocess.h"

namespace hilnas::testing {

inline std::string HilnasBinary() { return std::string(HILNAS_BINARY_DIR) + "/tools/hilnas"; }

// A running `hilnas` child whose stdout and stderr go to `log_path`.
// Killed with SIGKILL on destruction if still running.
class Process {
 public:
  Process(const std::vector<std::string>& args, std::string log_path)
      : log_path_(std::move(log_path)) {
    pid_ = SpawnProcess(HilnasBinary(), args, log_path_, /*append_log=*/true);
  }
  ~Process() {
    if (running()) {
      Signal(SIGKILL);
      Wait();
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  bool running() {
    if (exited_) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      status_ = status;
    }
    return !exited_;
  }
  void Signal(int sig) { kill(pid_, sig); }
  // Exit code, or 128 + signal.
  int Wait() {
    if (!exited_) {
      waitpid(pid_, &status_, 0);
      exited_ = true;
    }
    return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
  }
  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  pid_t pid() const { return pid_; }

 private:
  std::string log_path_;
  pid_t pid_ = -1;
  bool exited_ = false;
  int status_ = 0;
};

// What a finished `hilnas` command printed (stdout and stderr) and its exit
// code: 128 + signal when it was killed, 137 when it ran past the limit.
struct CommandResult {
  int exit_code;
  std::string output;
};

// Runs `hilnas ARGS` (ARGS split by the shell) to the end, killing it after
// `timeout_s` seconds.
inline CommandResult RunHilnas(const std::string& args, int timeout_s = 600) {
  const std::string cmd =
      "timeout -s KILL " + std::to_string(timeout_s) + " " + HilnasBinary() + " " + args + " 2>&1";
  CommandResult r{-1, ""};
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Polls `condition` every 20 ms until it holds or `timeout_s` passes.
inline bool WaitFor(const std::function<bool()>& condition, double timeout_s) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

}  // namespace hilnas::testing

#endif  // HILNAS_TESTS_PROCESS_H_
