// Running a user's shell command with a timeout: the external-runtime agent
// (llama-bench, ExecuTorch over adb) and the external quality evaluator.
// Commands come only from the command lines of the coordinator (--evaluator)
// and the agents (--bench-command), never from the network.
#ifndef HILNAS_UTIL_SUBPROCESS_H_
#define HILNAS_UTIL_SUBPROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hilnas {

struct CommandOutput {
  std::string out, err;
  // The command's peak resident memory: the largest VmHWM among its process
  // group (the command and what it started), sampled while it runs; not
  // this process's. 0 when it ended before the first sample.
  int64_t peak_rss_bytes = 0;
};

// Replaces every {key} (key: letters, digits, _) in `tmpl`; other braces,
// such as JSON's, are left alone. INVALID_ARGUMENT names an unknown key.
absl::StatusOr<std::string> ExpandCommand(const std::string& tmpl,
                                          const std::map<std::string, std::string>& values);

// Runs `command` with /bin/sh -c and returns its standard output. Kills the
// command's process group after `timeout_s` (DEADLINE_EXCEEDED); a non-zero
// exit is INTERNAL with the exit code and the output's tail.
absl::StatusOr<std::string> RunShellCommand(const std::string& command, double timeout_s);

// As RunShellCommand, keeping standard error apart.
absl::StatusOr<CommandOutput> RunCapturing(const std::string& command, double timeout_s);

// Runs argv[0] (looked up in PATH when it has no slash) with `argv`, no
// shell, with `env` added to the environment; otherwise as RunCapturing.
// Nothing in argv is interpreted: cluster commands get job names and paths
// as plain arguments.
absl::StatusOr<CommandOutput> RunProgram(const std::vector<std::string>& argv, double timeout_s,
                                         const std::map<std::string, std::string>& env = {});

// Starts `binary ARGS...` (fork + execv, no shell) with standard output and
// error sent to `log` (appended when `append_log`, else truncated), or
// inherited when `log` is empty. Returns the child's pid; -1 if fork fails.
pid_t SpawnProcess(const std::string& binary, const std::vector<std::string>& args,
                   const std::string& log, bool append_log);

// Makes freed memory stay with the process for the next allocation of its
// size. glibc's malloc serves blocks from 128 KiB up with mmap and unmaps
// them on free, raising that threshold only as blocks are freed, and hands
// the heap's top back to the kernel (trim) once 128 KiB or more lie free
// there; which of a prefill's activations (4-12 MB each for full4 at 2048
// tokens) came back as fresh pages then depended on the heap's layout:
// `hilnas run` of full4 at 2048 tokens on an AMD EPYC (Zen 5) took 523-528
// ms to its first token with --max-new-tokens 3 in some processes and
// 632-689 ms in others (every op ~10% slower, copies 2.6x), and 477 ms on
// 2 threads against 297 with the memory kept: page faults take the
// process's memory lock and zero each page on one thread, so they do not
// scale with threads. With glibc, mmap is left to allocations the heap
// cannot grow for, and the heap is never trimmed (mallopt); the peak of a
// run's memory is unchanged, it is just not returned before the process
// ends. Elsewhere (Android's bionic, musl) it does nothing. Returns
// whether it applied.
bool KeepFreedMemory();

// Re-executes this program once (execv of /proc/self/exe) with the thread
// settings every timing in hilnas runs under, unless OMP_WAIT_POLICY is
// already set; libgomp and OpenBLAS read them only at start-up.
// - OpenMP workers spin about 0.1 ms (GOMP_SPINCOUNT 10000) before they
//   sleep: a decode step's ~20 parallel regions follow each other closely
//   and find them awake, while a long OpenBLAS product does not share its
//   cores with spinning workers for long. Spinning without a bound
//   (libgomp's default, 3 ms) fought OpenBLAS's threads: decode of
//   mobilellm-flash-350m on 2 cores went from 40 to 92 ms/token, and hilnas
//   eval fell from 11,000 to 5,000 tokens/s.
// - OpenBLAS threads sleep after about 2^20 cycles idle
//   (OPENBLAS_THREAD_TIMEOUT 20) instead of 2^28: otherwise they spin on
//   for ~0.1 s after a prefill, under the decode that follows, and full4's
//   decode on 2 threads swung between 1.45 and 2.1 ms/token.
// - OPENBLAS_NUM_THREADS = `threads` when set (> 0).
// `reexec_anyway`: the caller changed a variable read at start-up too
// (SetBlasCoreForCpu), so re-execute even when OMP_WAIT_POLICY is set (the
// thread settings already present are kept).
// Returns only if it did not re-execute (already set, or execv failed),
// with KeepFreedMemory applied.
// Timings place their own threads (an agent's --cpu-set, the spin pool),
// so OpenMP's binding is undone (UndoOpenMpStartupBinding) and turned off
// for the program run anew (OMP_PROC_BIND=false, no OMP_PLACES or
// GOMP_CPU_AFFINITY), with a line on stderr saying so.
void ReexecWithTimingThreads(char** argv, int threads, bool reexec_anyway = false);

// Where OpenMP binds its threads (OMP_PROC_BIND other than false, or
// GOMP_CPU_AFFINITY), libgomp pins the main thread to the first of its
// places as the program starts. A thread the program starts later inherits
// that one place, and so does a program it execs: /proc/self/exe run
// anew found a single CPU, made one place of it and bound every thread
// there, so `hilnas run --threads 2` timed one CPU (full4's 256-token
// prompt 72 ms against 37). Widens the calling thread's mask back to the
// CPUs of all the places (the mask the program started with, as far as the
// places cover it) and returns them, as a list ("0-1"); returns "" and
// changes nothing where OpenMP binds no thread.
std::string UndoOpenMpStartupBinding();

// The CPUs the calling thread may run on, as a list ("0-3,6").
std::string CurrentCpuList();

// "2 threads on 1 CPUs (0): they take turns, ..." where `threads` is more
// than the CPUs the calling thread may run on (a --cpu-set or taskset
// narrower than --threads, an emulator's host), for a timing to warn with;
// "" otherwise.
std::string FewerCpusThanThreads(int threads);

}  // namespace hilnas

#endif  // HILNAS_UTIL_SUBPROCESS_H_
