// The small benchmark job the multi-process tests hand to real agents.
#ifndef HILNAS_TESTS_TINY_JOB_H_
#define HILNAS_TESTS_TINY_JOB_H_

#include "proto/benchmark.pb.h"

namespace hilnas::testing {

// Tiny model; two prompt lengths x 4 runs keep each job busy for a few
// hundred ms so a kill lands mid-job.
inline BenchmarkRequest TinyJob() {
  BenchmarkRequest r;
  ArchSpec* a = r.mutable_arch();
  a->set_name("tiny");
  a->set_num_layers(4);
  a->set_d_model(64);
  a->set_d_ffn(128);
  a->set_num_heads(4);
  a->set_num_kv_heads(2);
  a->set_head_dim(16);
  a->set_vocab_size(256);
  a->set_tie_embeddings(true);
  a->set_rope_theta(10000);
  a->set_norm_eps(1e-5);
  a->set_qk_norm(true);
  a->set_sliding_window(16);
  for (AttentionType t : {FULL, SLIDING_WINDOW, SKIP, FULL}) a->add_attention(t);
  r.add_prompt_lengths(64);
  r.add_prompt_lengths(128);
  r.set_decode_tokens(4);
  r.set_repeats(4);
  r.set_max_repeats(4);
  r.set_threads(1);
  return r;
}

}  // namespace hilnas::testing

#endif  // HILNAS_TESTS_TINY_JOB_H_
