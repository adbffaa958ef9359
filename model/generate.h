// Greedy generation with chunked prefill and single-token decode, timed the
// way an on-device runner is timed (ExecuTorch extension/llm/runner/stats.h).
#ifndef HILNAS_MODEL_GENERATE_H_
#define HILNAS_MODEL_GENERATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/decoder.h"

namespace hilnas {

// Named timestamps in milliseconds from the start of Generate.
// TTFT (time to first token) = first_token_ms: the prompt has been prefilled
// and the first generated token chosen from its logits.
struct Stats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;  // including the first
  int64_t prefill_chunk = 0;
  double prompt_eval_end_ms = 0;  // last prefill chunk finished
  double first_token_ms = 0;      // TTFT
  double inference_end_ms = 0;    // last token chosen
  int64_t kv_cache_bytes = 0;

  double ttft_ms() const { return first_token_ms; }
  // Decode speed over the tokens after the first.
  double decode_ms_per_token() const;
  double decode_tokens_per_s() const;
  std::string ToJson() const;
};

struct GenerateOptions {
  int64_t max_new_tokens = 16;
  int64_t prefill_chunk = 1024;  // MobileLLM-Flash Sec. 4.2.2 found 1024 best for 2k prompts
  // Called with each generated id as soon as it is chosen (streaming);
  // returning false stops generation after that id (an end-of-text token).
  std::function<bool(int64_t)> on_token;
};

struct Generation {
  std::vector<int64_t> tokens;  // generated ids only
  Stats stats;
};

// Prefills `prompt` in chunks into a fresh cache sized for prompt +
// max_new_tokens, then decodes greedily one token at a time. Runs under
// NoGradGuard. INVALID_ARGUMENT for an empty prompt or ids outside the
// vocabulary; errors from libtorch come back as INTERNAL with context.
absl::StatusOr<Generation> GreedyGenerate(Decoder& decoder, const std::vector<int64_t>& prompt,
                                          const GenerateOptions& options);

// Appends `prompt` to `cache` in chunks of `chunk` tokens (MobileLLM-Flash
// Sec. 4.2.2) and returns the logits of the last prompt position,
// [1, 1, vocab]. REQUIRES: a valid prompt, chunk > 0, room in the cache.
torch::Tensor PrefillChunked(Decoder& decoder, const std::vector<int64_t>& prompt, int64_t chunk,
                             KvCache& cache);

// The greedy choice from logits [..., vocab]: the index of the largest
// value in the last row, the first of equals, a NaN's if there is one
// (torch.argmax's). f32 rows are read in place, anything else through ATen.
int64_t GreedyPick(const torch::Tensor& logits);

// INVALID_ARGUMENT for an empty prompt or an id outside the vocabulary.
absl::Status ValidatePrompt(const std::vector<int64_t>& prompt, int64_t vocab_size);

// The generation loop around a caller's prefill (GreedyGenerate's chunked
// prefill, KV prediction's auxiliary prefill): `prefill` fills a fresh cache
// sized for the prompt and max_new_tokens and returns the logits of the last
// prompt position; the first token is chosen from them (closing TTFT), the
// rest decoded greedily, every Stats timestamp filled. Under NoGradGuard;
// libtorch errors come back as INTERNAL.
absl::StatusOr<Generation> GenerateAfterPrefill(
    Decoder& decoder, int64_t prompt_tokens, int64_t prefill_chunk, const GenerateOptions& options,
    const std::function<torch::Tensor(KvCache&)>& prefill);

}  // namespace hilnas

#endif  // HILNAS_MODEL_GENERATE_H_
