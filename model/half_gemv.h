// y = W x with W stored in half precision (bf16 or f16) and x, y in f32:
// decode as phones run it, reading 2 bytes per weight instead of 4 (decode
// is bound by weight bytes). libtorch 1.13 has no mixed-precision GEMV, and
// CPUs without fast half-precision arithmetic compute in f32 anyway. On
// x86 with AVX2/FMA/F16C (checked at run time) an intrinsics kernel, a
// portable loop elsewhere (the aarch64 agent bundle).
#ifndef HILNAS_MODEL_HALF_GEMV_H_
#define HILNAS_MODEL_HALF_GEMV_H_

#include <torch/torch.h>

namespace hilnas {

// w [out, in] bf16 or f16, contiguous; x f32 with `in` elements. Returns
// f32 [out]. Rows are split across libtorch's intra-op threads.
torch::Tensor HalfWeightGemv(const torch::Tensor& w, const torch::Tensor& x);

}  // namespace hilnas

#endif  // HILNAS_MODEL_HALF_GEMV_H_
