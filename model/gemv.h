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

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

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

// How the kernel streams a matrix's rows through memory (f32, bf16 and f16
// weights, x86's AVX2 kernel and aarch64's NEON kernel; the quantized
// products and the portable loop have one form). All forms sum each row in
// the same order and give the same bits; which reads fastest depends on
// the CPU's prefetchers and the weights' type, not on the instruction set:
// on AMD's Zen 4 and Zen 5 rows side by side cost 1.4-2.7x one row at a
// time, and f16 rows gain 12-16% from the prefetch on Zen 5
// (bench/data/runtime-compare.md), while llama.cpp's f32 products read five
// rows side by side and outran one-row on a Xeon. So no form is fixed for
// every CPU: TuneGemvForm times them on the weights at hand (issue 35:
// nothing tuned to one model of CPU).
enum class GemvForm {
  kOneRow,          // one row at a time (the default)
  kOneRowPrefetch,  // the same, asking for the line 4 KiB ahead
  kTwoRows,         // two rows side by side, sharing each load of x
  kFourRows,        // four rows side by side (x86 with AVX-512VL; aarch64)
};
// "one-row", "one-row-prefetch", "two-rows", "four-rows".
const char* GemvFormName(GemvForm form);
// The form named so; INVALID_ARGUMENT naming `name` and the choices.
absl::StatusOr<GemvForm> ParseGemvForm(absl::string_view name);
// The forms this CPU runs: all four on aarch64 and on x86 with AVX-512VL,
// three with AVX2 only, kOneRow alone for the portable loop.
std::vector<GemvForm> GemvFormsHere();
// The form every product in this process uses from now on (kOneRow until
// set); one this CPU does not run (GemvFormsHere) falls back to kOneRow.
void SetGemvForm(GemvForm form);
GemvForm CurrentGemvForm();

struct GemvFormTime {
  GemvForm form;
  double median_ms;  // one pass over the tuned matrices
};
// The tuner's rule: the form with the lowest median, if it beats one-row's
// by more than kGemvFormMargin of it; else one-row (a tie, or noise, keeps
// the default). `times` must hold kOneRow.
constexpr double kGemvFormMargin = 0.05;
GemvForm ChooseGemvForm(const std::vector<GemvFormTime>& times);

struct GemvTuning {
  GemvForm chosen = GemvForm::kOneRow;
  std::vector<GemvFormTime> times;  // empty when there was nothing to choose
  int64_t bytes = 0;                // read by one pass
  int passes = 0;                   // timed, per form
  // "one-row (one-row 1.636 ms, one-row-prefetch 1.773 ms, ..., medians of
  // 25 passes over 56.6 MB)".
  std::string Describe() const;
};
// Times each form of GemvFormsHere() over `matrices` (the 2-D f32, bf16
// and f16 ones among them, in order, until they reach 512 MiB), as decode
// calls the kernel: one product at a time on libtorch's current intra-op
// threads; passes of the forms interleaved, in turn first (3 to 25 of
// each, about 250 ms in all for small models); an untimed pass before.
// Then SetGemvForm(ChooseGemvForm(...)) and returns what it measured. With
// one form (or no matrix) it times nothing and sets kOneRow.
GemvTuning TuneGemvForm(const std::vector<torch::Tensor>& matrices);

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

// The fewest rows of w a thread takes in WeightGemvsInto's split: 256 KiB
// of f32, f16 or bf16 weights, 64 Ki quantized weights (model/quant.h), and
// at least 16 rows.
int64_t WeightGemvGrainRows(const torch::Tensor& w);

// n f16 (or bf16) values widened to f32 on the calling thread, with the
// same instructions as the products (F16C, NEON's FCVTL): ATen's copy and
// GCC 12's vector _Float16 conversion both widen one value at a time.
void WidenHalves(const uint16_t* src, int64_t n, bool bf16, float* out);

// n floats rounded to f16 (to nearest, ties to even: c10::Half's and
// ATen's conversion, the same bits for every value but NaN's payload) on
// the calling thread, with F16C's VCVTPS2PH or NEON's FCVTN where the CPU
// has them: c10::Half converts one value at a time in integer steps.
void NarrowToHalves(const float* src, int64_t n, uint16_t* out);

// w (bf16 or f16, contiguous) widened into out (w.numel() floats) by
// WidenHalves, split across libtorch's threads: a prompt multiplies by the
// widened matrix (model/decoder_layers.cc).
void WidenInto(const torch::Tensor& w, float* out);

}  // namespace hilnas

#endif  // HILNAS_MODEL_GEMV_H_
