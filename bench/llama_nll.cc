// llama.cpp's mean NLL over windows of token ids, for bench/eval_exact.sh
// (issue 36: `hilnas eval` at q4_0 against llama.cpp on the same GGUF).
// Not part of hilnas's build: the script compiles it against a llama.cpp
// tree the user built (its include/ and libllama.so), which is never a
// dependency. llama-perplexity would do this but reads text through the
// GGUF's tokenizer; the demo corpus is byte ids under a placeholder
// vocabulary, so this feeds the ids themselves.
//
//   llama_nll MODEL.gguf WINDOWS.i32 SEQ_LEN THREADS
//
// WINDOWS.i32: int32 ids, windows of SEQ_LEN + 1 back to back. Each window
// is one batch on an empty cache (f32 K and V, flash attention off, as
// ../shared/MACHINE-NOTES.md says exactness needs); its SEQ_LEN positions
// predict the next id, and the NLL is -log softmax(logits)[target] in
// double. Prints the mean over all positions of all windows (what
// hilnas eval's CrossEntropy averages), then the window count.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "llama.h"

namespace {

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "llama_nll: %s\n", what);
  std::exit(1);
}

void Quiet(ggml_log_level, const char*, void*) {}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) Die("usage: llama_nll MODEL.gguf WINDOWS.i32 SEQ_LEN THREADS");
  const int seq_len = std::atoi(argv[3]), threads = std::atoi(argv[4]);
  if (seq_len <= 0 || threads <= 0) Die("SEQ_LEN and THREADS must be positive");
  std::ifstream in(argv[2], std::ios::binary);
  std::vector<int32_t> ids;
  for (int32_t v; in.read(reinterpret_cast<char*>(&v), sizeof v);) ids.push_back(v);
  const size_t per = static_cast<size_t>(seq_len) + 1;
  if (ids.empty() || ids.size() % per != 0) Die("WINDOWS.i32 is not whole windows of SEQ_LEN + 1");

  llama_log_set(Quiet, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) Die("cannot load the model");
  const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = seq_len;
  cp.n_batch = seq_len;
  cp.n_ubatch = seq_len;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) Die("cannot create a context");

  llama_batch batch = llama_batch_init(seq_len, 0, 1);
  double sum = 0;
  const size_t windows = ids.size() / per;
  for (size_t w = 0; w < windows; ++w) {
    const int32_t* win = ids.data() + w * per;
    llama_memory_clear(llama_get_memory(ctx), true);
    batch.n_tokens = seq_len;
    for (int i = 0; i < seq_len; ++i) {
      if (win[i] < 0 || win[i] >= n_vocab) Die("an id outside the model's vocabulary");
      batch.token[i] = win[i];
      batch.pos[i] = i;
      batch.n_seq_id[i] = 1;
      batch.seq_id[i][0] = 0;
      batch.logits[i] = 1;
    }
    if (llama_decode(ctx, batch) != 0) Die("llama_decode failed");
    for (int i = 0; i < seq_len; ++i) {
      const float* logits = llama_get_logits_ith(ctx, i);
      double mx = logits[0];
      for (int v = 1; v < n_vocab; ++v) mx = std::max(mx, static_cast<double>(logits[v]));
      double z = 0;
      for (int v = 0; v < n_vocab; ++v) z += std::exp(logits[v] - mx);
      sum += mx + std::log(z) - logits[win[i + 1]];
    }
  }
  std::printf("%.6f %zu\n", sum / (windows * seq_len), windows);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
