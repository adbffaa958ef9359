// y = W x for one token (decode), with W stored in f32, bf16 or f16 and x,
// y in f32. Decode is bound by weight bytes: half-precision weights are
// read as they are, 2 bytes per weight, as phones run them (libtorch 1.13
// has no mixed-precision GEMV, and CPUs without fast half-precision
// arithmetic compute in f32 anyway). f32 weights take the same kernel
// rather than BLAS sgemv so that a decode step runs on one thread pool:
// OpenBLAS's threads and OpenMP's, both awake, fight for the same cores.
// On x86 with AVX2/FMA/F16C (checked at run time) an intrinsics kernel, on
// aarch64 (the phone agent bundle) a NEON kernel, a portable loop elsewhere.
#ifndef HILNAS_MODEL_GEMV_H_
#define HILNAS_MODEL_GEMV_H_

#include <torch/torch.h>

#include <vector>

namespace hilnas {

// Which code computes a product: the best this CPU runs (what every caller
// uses), or the portable loop, to check one against the other
// (model/kernel_check.h, `hilnas-agent --check-kernels`).
// kBaseline: the best path without the optional extensions a CPU of its
// architecture may lack (the quantized products' AVX-512 VNNI on x86, the
// dot-product instructions on aarch64), to check those against it.
enum class KernelPath { kBest, kBaseline, kPortable };

// The best path's name on this CPU: "avx2+fma+f16c", "neon" or "portable".
const char* GemvKernelName();

// w [out, in] f32, bf16 or f16, contiguous; x f32 with `in` elements.
// Returns f32 [out]. Rows are split across libtorch's intra-op threads.
torch::Tensor WeightGemv(const torch::Tensor& w, const torch::Tensor& x);

// The products of one x with several matrices of the same type and width
// (q/k/v, gate/up) in one parallel region: the workers wake once, not once
// per matrix. Returns f32 [rows of ws[m]] for each m.
std::vector<torch::Tensor> WeightGemvs(const std::vector<torch::Tensor>& ws, const torch::Tensor& x,
                                       KernelPath path = KernelPath::kBest);

// The raw form the allocation-free decode step uses: for each of the n
// products, y[0..rows) = w x, with w as above and x `in` floats.
struct GemvProduct {
  const torch::Tensor* w;
  float* y;
};
void WeightGemvsInto(const GemvProduct* products, size_t n, const float* x,
                     KernelPath path = KernelPath::kBest);

// n f16 (or bf16) values widened to f32 on the calling thread, with the
// same instructions as the products (F16C, NEON's FCVTL): ATen's copy and
// GCC 12's vector _Float16 conversion both widen one value at a time.
void WidenHalves(const uint16_t* src, int64_t n, bool bf16, float* out);

// w (bf16 or f16, contiguous) widened into out (w.numel() floats) by
// WidenHalves, split across libtorch's threads: a prompt multiplies by the
// widened matrix (model/decoder_layers.cc).
void WidenInto(const torch::Tensor& w, float* out);

}  // namespace hilnas

#endif  // HILNAS_MODEL_GEMV_H_
