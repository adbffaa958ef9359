// The runtime's hand-written kernels checked on the CPU at hand: the best
// path (AVX2 on x86, NEON on aarch64) against the portable loop and both
// against a double-precision product of the same weights, on sizes that are
// and are not multiples of the vector width, split over `threads` threads;
// each of the GEMV's other forms (GemvForm) against the default's bits.
// The phone agent runs it (`hilnas-agent --check-kernels`): the arm64 test
// runs it under qemu with 4 threads, as the phone runs them (MobileLLM-Flash
// Sec. 4.2), and a unit test runs it on the build machine.
#ifndef HILNAS_MODEL_KERNEL_CHECK_H_
#define HILNAS_MODEL_KERNEL_CHECK_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hilnas {

// Relative errors are |got - want| / sum_i |w_i x_i| for a GEMV row (the
// scale of its rounding), |got - want| / max |want| for attention.
struct KernelCheckRow {
  std::string kernel;                    // "gemv f16 67x1027", "attention prefill window 48" ...
  double best_error = 0;                 // best path against the double reference
  std::optional<double> baseline_error;  // the path without optional extensions (quantized)
  std::optional<double> portable_error;  // portable loop against it (gemv and quantized)
  bool ok = false;                       // both within KernelCheck::kTolerance
};

struct KernelCheck {
  static constexpr double kTolerance = 1e-5;
  std::string gemv_path;   // GemvKernelName()
  std::string quant_path;  // QuantKernelName()
  int threads = 0;
  std::vector<KernelCheckRow> rows;

  bool ok() const;
  // One line a row and a verdict: "kernels: ok (...)" or "kernels: FAILED".
  std::string Report() const;
};

// INVALID_ARGUMENT for threads outside 1..256; INTERNAL when libtorch throws.
absl::StatusOr<KernelCheck> CheckKernels(int threads);

}  // namespace hilnas

#endif  // HILNAS_MODEL_KERNEL_CHECK_H_
