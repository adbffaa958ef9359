// The small benchmark job and campaign search space the multi-process tests use.
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

// A campaign search space the demo backbone prunes to in seconds, for the
// multi-process campaign tests' configs (text format).
inline constexpr char kTinyCampaignSpace[] = R"(search_space {
  base { num_heads: 8 num_kv_heads: 2 head_dim: 32 vocab_size: 256 tie_embeddings: true
         rope_theta: 10000 norm_eps: 1e-05 sliding_window: 32 }
  num_layers { min: 2 max: 8 step: 1 }
  d_ffn { min: 128 max: 768 step: 64 }
  d_model { min: 128 max: 256 step: 64 }
  attention_choices: FULL attention_choices: SLIDING_WINDOW attention_choices: SKIP
  block_size: 64 max_consecutive_efficient: 2
}
)";

}  // namespace hilnas::testing

#endif  // HILNAS_TESTS_TINY_JOB_H_
