#include "model/generate.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace hilnas {

double Stats::decode_ms_per_token() const {
  return generated_tokens > 1 ? (inference_end_ms - first_token_ms) / double(generated_tokens - 1)
                              : 0.0;
}

double Stats::decode_tokens_per_s() const {
  const double ms = decode_ms_per_token();
  return ms > 0 ? 1000.0 / ms : 0.0;
}

std::string Stats::ToJson() const {
  const nlohmann::json j = {{"prompt_tokens", prompt_tokens},
                            {"generated_tokens", generated_tokens},
                            {"prefill_chunk", prefill_chunk},
                            {"prompt_eval_end_ms", prompt_eval_end_ms},
                            {"ttft_ms", first_token_ms},
                            {"inference_end_ms", inference_end_ms},
                            {"decode_ms_per_token", decode_ms_per_token()},
                            {"decode_tokens_per_s", decode_tokens_per_s()},
                            {"kv_cache_bytes", kv_cache_bytes}};
  return j.dump();
}

absl::Status ValidatePrompt(const std::vector<int64_t>& prompt, int64_t vocab_size) {
  if (prompt.empty()) return absl::InvalidArgumentError("prompt is empty");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] < 0 || prompt[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("prompt token ", i, " id ", prompt[i],
                                                     " is outside vocabulary 0..", vocab_size - 1));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Generation> GenerateAfterPrefill(
    Decoder& decoder, int64_t prompt_tokens, int64_t prefill_chunk, const GenerateOptions& options,
    const std::function<torch::Tensor(KvCache&)>& prefill) {
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  try {
    torch::NoGradGuard no_grad;
    Generation g;
    Stats& s = g.stats;
    s.prompt_tokens = prompt_tokens;
    s.prefill_chunk = prefill_chunk;
    const auto t0 = Clock::now();
    KvCache cache =
        decoder.NewCache(1, prompt_tokens + std::max<int64_t>(options.max_new_tokens, 1));
    s.kv_cache_bytes = cache.bytes();
    torch::Tensor logits = prefill(cache);
    s.prompt_eval_end_ms = ms_since(t0);
    auto next = logits.view({-1}).argmax();
    g.tokens.push_back(next.item<int64_t>());
    s.first_token_ms = ms_since(t0);
    bool go_on = !options.on_token || options.on_token(g.tokens.back());
    for (int64_t i = 1; go_on && i < options.max_new_tokens; ++i) {
      logits = decoder.ForwardCached(next.view({1, 1}), cache, /*last_only=*/true);
      next = logits.view({-1}).argmax();
      g.tokens.push_back(next.item<int64_t>());
      go_on = !options.on_token || options.on_token(g.tokens.back());
    }
    s.inference_end_ms = ms_since(t0);
    s.generated_tokens = static_cast<int64_t>(g.tokens.size());
    return g;
  } catch (const c10::Error& e) {
    const std::string& name = decoder.arch().name;
    return absl::InternalError(absl::StrCat("generating with ", name.empty() ? "the model" : name,
                                            ": ", e.what_without_backtrace()));
  }
}

absl::StatusOr<Generation> GreedyGenerate(Decoder& decoder, const std::vector<int64_t>& prompt,
                                          const GenerateOptions& options) {
  if (absl::Status s = ValidatePrompt(prompt, decoder.arch().vocab_size); !s.ok()) return s;
  if (options.prefill_chunk <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill_chunk ", options.prefill_chunk, " must be positive"));
  }
  const int64_t n = static_cast<int64_t>(prompt.size());
  return GenerateAfterPrefill(decoder, n, options.prefill_chunk, options, [&](KvCache& cache) {
    return PrefillChunked(decoder, prompt, options.prefill_chunk, cache);
  });
}

torch::Tensor PrefillChunked(Decoder& decoder, const std::vector<int64_t>& prompt, int64_t chunk,
                             KvCache& cache) {
  const int64_t n = static_cast<int64_t>(prompt.size());
  auto prompt_t = torch::tensor(prompt, torch::kLong).view({1, n});
  torch::Tensor logits;
  for (int64_t pos = 0; pos < n; pos += chunk) {
    const int64_t len = std::min(chunk, n - pos);
    logits = decoder.ForwardCached(prompt_t.narrow(1, pos, len), cache, /*last_only=*/true);
  }
  return logits;
}

}  // namespace hilnas
