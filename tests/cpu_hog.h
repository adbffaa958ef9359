// What the quiet-machine gate and drift-check tests share: a CPU hog pinned
// to CPU 0, and a job long enough (~60 ms a run on one thread) that timer
// and scheduler noise stay small beside it.
#ifndef HILNAS_TESTS_CPU_HOG_H_
#define HILNAS_TESTS_CPU_HOG_H_

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "proto/benchmark.pb.h"

namespace hilnas::testing {

// 4 full layers at d_model 256, a 1024-token prompt and 16 decode tokens,
// `repeats` timed runs after one warm-up, one thread.
inline BenchmarkRequest HogJob(const std::string& name, int repeats) {
  BenchmarkRequest r;
  ArchSpec* a = r.mutable_arch();
  a->set_name(name);
  a->set_num_layers(4);
  a->set_d_model(256);
  a->set_d_ffn(768);
  a->set_num_heads(4);
  a->set_num_kv_heads(2);
  a->set_head_dim(64);
  a->set_vocab_size(4096);
  a->set_tie_embeddings(true);
  a->set_rope_theta(10000);
  a->set_norm_eps(1e-5);
  for (int i = 0; i < 4; ++i) a->add_attention(FULL);
  r.add_prompt_lengths(1024);
  r.set_decode_tokens(16);
  r.set_warmup_runs(1);
  r.set_repeats(repeats);
  r.set_max_repeats(repeats);
  r.set_threads(1);
  return r;
}

// A child process spinning on CPU 0 for at most `seconds`: alarm() ends it
// even if the test dies before StopHog.
inline pid_t StartHog(int seconds) {
  const pid_t pid = fork();
  if (pid == 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    sched_setaffinity(0, sizeof set, &set);
    alarm(seconds);
    volatile unsigned long spin = 0;
    for (;;) spin = spin + 1;
  }
  return pid;
}

inline void StopHog(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

}  // namespace hilnas::testing

#endif  // HILNAS_TESTS_CPU_HOG_H_
