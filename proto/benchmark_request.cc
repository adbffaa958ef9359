#include "proto/benchmark_request.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace hilnas {

BenchmarkRequest WithDefaults(BenchmarkRequest r) {
  if (r.prompt_lengths().empty()) {
    for (int p : {1024, 2048, 4096}) r.add_prompt_lengths(p);  // MobileLLM-Flash Sec. 4.2.2
  }
  if (r.decode_tokens() <= 0) r.set_decode_tokens(16);
  if (r.prefill_chunk() <= 0) r.set_prefill_chunk(1024);
  if (r.warmup_runs() <= 0) r.set_warmup_runs(1);
  if (r.repeats() <= 0) r.set_repeats(3);
  if (r.max_repeats() < r.repeats()) r.set_max_repeats(std::max(10, r.repeats()));
  if (r.max_rel_spread() <= 0) r.set_max_rel_spread(0.05);
  if (r.precision() == PRECISION_UNSPECIFIED) r.set_precision(FP32);
  return r;
}

absl::Status ValidateBenchmarkRequest(const BenchmarkRequest& r) {
  if (!r.has_arch() && r.checkpoint_dir().empty()) {
    return absl::InvalidArgumentError("benchmark request: set arch or checkpoint_dir");
  }
  for (int p : r.prompt_lengths()) {
    if (p <= 0 || p > (1 << 20)) {
      return absl::InvalidArgumentError(
          absl::StrCat("benchmark request: prompt_lengths value ", p, " is not in 1..1048576"));
    }
  }
  if (r.decode_tokens() < 0 || r.repeats() < 0 || r.max_repeats() < 0 || r.threads() < 0 ||
      r.warmup_runs() < 0 || r.prefill_chunk() < 0) {
    return absl::InvalidArgumentError(
        "benchmark request: decode_tokens, repeats, max_repeats, threads, warmup_runs and "
        "prefill_chunk must not be negative");
  }
  if (!r.kv_dtype().empty() && r.kv_dtype() != "f32" && r.kv_dtype() != "f16" &&
      r.kv_dtype() != "q8_0") {
    return absl::InvalidArgumentError(absl::StrCat("benchmark request: kv_dtype \"",
                                                   r.kv_dtype().substr(0, 16),
                                                   "\" is not one of f32, f16, q8_0"));
  }
  if (r.max_repeats() > 1000) {
    return absl::InvalidArgumentError(
        absl::StrCat("benchmark request: max_repeats ", r.max_repeats(), " exceeds 1000"));
  }
  // Bounds on everything else that sizes work or memory on a device.
  struct Bound {
    const char* field;
    int64_t value, max;
  };
  for (const Bound& b :
       {Bound{"decode_tokens", r.decode_tokens(), 1 << 16}, Bound{"repeats", r.repeats(), 1000},
        Bound{"warmup_runs", r.warmup_runs(), 100}, Bound{"threads", r.threads(), 1024},
        Bound{"prefill_chunk", r.prefill_chunk(), 1 << 20},
        Bound{"prompt_lengths (count)", r.prompt_lengths_size(), 64}}) {
    if (b.value > b.max) {
      return absl::InvalidArgumentError(
          absl::StrCat("benchmark request: ", b.field, " ", b.value, " exceeds ", b.max));
    }
  }
  if (!(r.max_rel_spread() >= 0 && r.max_rel_spread() <= 10)) {
    return absl::InvalidArgumentError(absl::StrCat("benchmark request: max_rel_spread ",
                                                   r.max_rel_spread(), " is not in [0, 10]"));
  }
  return absl::OkStatus();
}

FailureKind FailureKindFor(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
      return FAILURE_NONE;
    case absl::StatusCode::kResourceExhausted:
      return OUT_OF_MEMORY;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kUnimplemented:
      return UNSUPPORTED_ARCH;
    case absl::StatusCode::kDeadlineExceeded:
      return TIMEOUT;
    default:
      return RUNTIME_ERROR;
  }
}

}  // namespace hilnas
