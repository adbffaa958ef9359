#include "model/runtime_tuning.h"

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/quant.h"
#include "util/status_macros.h"

namespace hilnas {

std::string QuantizedProductsDescription(const Decoder& decoder) {
  int quantized = 0, q4 = 0, grouped = 0;
  for (const auto& [name, t] : decoder.NamedTensors()) {
    const std::optional<QuantType> type = QuantTypeOf(t);
    if (!type) continue;
    ++quantized;
    if (*type != QuantType::kQ4_0) continue;
    ++q4;
    grouped += QuantGrouped(t);
  }
  if (quantized == 0) return "";
  std::string s = absl::StrCat(QuantKernelName(), " integer products");
  if (q4 > 0) {
    absl::StrAppend(&s, "; Q4_0 rows grouped eight at a time in ", grouped, " of ", q4,
                    " matrices");
  }
  absl::StrAppend(&s, "; a prompt's in blocks of ", PromptBlocksDescription());
  return s;
}

absl::StatusOr<RuntimeTuning> TuneRuntime(Decoder& decoder, std::optional<GemvForm> form,
                                          const std::function<void(const std::string&)>& progress) {
  auto say = [&](absl::string_view what, const std::string& line) {
    if (progress) progress(absl::StrCat(what, ": ", line));
  };
  RuntimeTuning t;
  const std::vector<torch::Tensor> matrices = decoder.DecodeMatrices();
  if (form) {
    SetGemvForm(*form);
    t.gemv_form = absl::StrCat(GemvFormName(CurrentGemvForm()),
                               CurrentGemvForm() == *form
                                   ? " (--gemv-form)"
                                   : " (--gemv-form: not run by this CPU, one-row instead)");
  } else {
    t.gemv = TuneGemvForm(matrices);
    t.gemv_form = t.gemv->Describe();
  }
  say("decode GEMV form", t.gemv_form);
  HILNAS_ASSIGN_OR_RETURN(t.pool, TuneDecodeThreadPool(decoder));
  say("decode thread pool", t.pool.Describe());
  const Arch& a = decoder.arch();
  t.split = TuneDecodeSplit(a.num_heads, a.num_kv_heads, a.head_dim, decoder.kv_dtype());
  say("decode attention", t.split.Describe());
  t.prompt = TunePromptGemm(matrices);
  say("prompt products", t.prompt.Describe());
  t.quantized = QuantizedProductsDescription(decoder);
  if (!t.quantized.empty()) say("quantized products", t.quantized);
  t.decode_kernel = t.quantized.empty() ? std::string(GemvKernelName())
                                        : absl::StrCat(QuantKernelName(), " integer products");
  return t;
}

}  // namespace hilnas
