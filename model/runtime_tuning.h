// The runtime's kernels fitted to this host and this model before anything
// is timed (issue 35): the decode GEMV's form, the decode step's thread
// pool, where decode attention splits, and who computes a prompt's
// products. `hilnas run`, the device agents, window pricing and
// bench/step_profile all tune through TuneRuntime, in one order, so each
// prices a candidate on the kernels the others would pick.
#ifndef HILNAS_MODEL_RUNTIME_TUNING_H_
#define HILNAS_MODEL_RUNTIME_TUNING_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "model/attention.h"
#include "model/decoder.h"
#include "model/gemv.h"
#include "model/prompt_gemm.h"
#include "model/work_split.h"

namespace hilnas {

struct RuntimeTuning {
  // The decode GEMV's form as timed (model/gemv.h); none where the caller
  // named one (`hilnas run --gemv-form`).
  std::optional<GemvTuning> gemv;
  // The named form's line where none was timed, else gemv->Describe().
  std::string gemv_form;
  ThreadPoolTuning pool;
  DecodeSplitTuning split;
  PromptGemmTuning prompt;
  // For quantized weights, the kernels their products run on, how many
  // Q4_0 matrices keep rows grouped for them, and the prompt blocks this
  // core's L2 sized (model/quant.h); empty for float weights.
  std::string quantized;
  // Who computes a decode step's products: the GEMV's path
  // (GemvKernelName: "avx2+fma+f16c", "neon", "portable") for float
  // weights, the integer products' (QuantKernelName) for quantized ones.
  std::string decode_kernel;
};

// Tunes the process's kernels for `decoder` at libtorch's current thread
// count, in the order each depends on: the GEMV's form on the model's
// matrices (or SetGemvForm(*form) where one is named: one-row where this CPU
// does not run it); the thread pool, timed on the model's own decode step
// with that form; decode attention's split, whose threshold is a
// hand-over's cost and so the pool's; then the prompt products. `progress`
// (may be null) gets a line as each is set: "decode GEMV form: ...",
// "decode thread pool: ...", "decode attention: ...", "prompt products:
// ...", and "quantized products: ..." for quantized weights. Errors (an
// arch too big for the memory at hand) come back as a status.
absl::StatusOr<RuntimeTuning> TuneRuntime(
    Decoder& decoder, std::optional<GemvForm> form = std::nullopt,
    const std::function<void(const std::string&)>& progress = nullptr);

// RuntimeTuning::quantized for `decoder`: empty unless a weight is
// quantized.
std::string QuantizedProductsDescription(const Decoder& decoder);

}  // namespace hilnas

#endif  // HILNAS_MODEL_RUNTIME_TUNING_H_
