// hilnas's own prompt matrix product for AVX-512 CPUs, run where it is the
// faster of it and OpenBLAS on the host at hand (issue 35: the runtime
// costs what it costs on every CPU it meets).
//
// A host may pin OpenBLAS's core (OPENBLAS_CORETYPE, set on some machines
// because older OpenBLAS builds fault on newer processors; hilnas keeps a
// user's setting, model/blas_core.h). On an AMD EPYC Zen 5 whose environment
// sets Haswell, OpenBLAS's AVX2 SGEMM ran a 256-token full4 prompt's
// products at about 89 GFLOP/s, and an f16 prompt took 1.1-1.6x
// llama.cpp's, which runs its own AVX-512 kernels; hilnas's AVX-512 kernel
// ran them at 165 GFLOP/s on one thread there (bench/gemm_threads; f16
// prefill 0.80-1.07x llama.cpp's, bench/data/runtime-compare.md). On a Zen 4
// whose OpenBLAS runs AVX-512 kernels the two are level on one thread and
// the own kernel 10-20% faster on two. So the runtime times both on the
// model's matrices before a job's runs (TunePromptGemm); f16 and bf16
// weights are widened as they are packed, not a whole matrix at a time.
#ifndef HILNAS_MODEL_PROMPT_GEMM_H_
#define HILNAS_MODEL_PROMPT_GEMM_H_

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hilnas {

// How a stored weight matrix's elements are laid out.
enum class GemmWeights { kF32, kF16, kBF16 };

// The layout OwnPromptGemm reads for a tensor of `type`: f32, f16 or bf16;
// nothing for any other.
std::optional<GemmWeights> GemmWeightsFor(c10::ScalarType type);

// Who runs a prompt's products: OwnPromptGemm or OpenBLAS (PooledSgemm).
enum class PromptGemmChoice {
  kAuto,  // OwnPromptGemm when it can run and OpenBLAS's core is below the
          // CPU's (BlasCoreBelowCpu), else OpenBLAS
  kOwn,   // OwnPromptGemm whenever it can run (HILNAS_PROMPT_GEMM=own)
  kBlas,  // OpenBLAS always (HILNAS_PROMPT_GEMM=blas)
};

// Whether this CPU can run OwnPromptGemm (x86-64 with AVX-512F).
bool OwnPromptGemmAvailable();

// The choice in force: HILNAS_PROMPT_GEMM (own, blas, auto) read once, or
// what SetPromptGemmChoice set since.
PromptGemmChoice CurrentPromptGemmChoice();
void SetPromptGemmChoice(PromptGemmChoice choice);

// Whether prompts' products go to OwnPromptGemm under the choice in force:
// under kAuto, TunePromptGemm's pick once one was made in this process
// (SetAutoPromptGemm), else the rule without timing (BlasCoreBelowCpu).
bool UseOwnPromptGemm();

// Under kAuto, who runs prompts' products from now on: the own product
// (true) or OpenBLAS; nothing returns to the rule without timing. What
// TunePromptGemm sets, and what a runtime holding several models sets back
// before each one's runs.
void SetAutoPromptGemm(std::optional<bool> own);
std::optional<bool> AutoPromptGemm();

struct PromptGemmTuning {
  bool timed = false;              // false: nothing to choose (see Describe)
  bool own = false;                // the pick: OwnPromptGemm was the faster
  double own_ms = 0, blas_ms = 0;  // the fastest pass of each
  int passes = 0;                  // timed, each
  int64_t rows = 0;                // prompt rows a pass multiplies
  int64_t weights = 0;             // weight elements a pass reads
  // "hilnas's AVX-512 kernel (own 12.1 ms, OpenBLAS 13.0 ms a pass of 128
  // rows over 8.9M weights, fastest of 5)", or why nothing was timed.
  std::string Describe() const;
};

// Times a prompt's products both ways, OwnPromptGemm against OpenBLAS
// (PooledSgemm, after widening half weights as the runtime does), at
// libtorch's current thread count, on `matrices` (the 2-D f32, f16 and
// bf16 ones, in order, until 8M weights: of one that would pass that, its
// first rows) times 128 rows; passes interleaved, each side first in turn,
// an untimed pass before, 3 to 9 of each (0.2-0.3 s for full4), each side's
// fastest compared. Under kAuto with the own product available,
// SetAutoPromptGemm(the faster) and returns what it measured; otherwise
// times nothing (timed false). Which product is the faster is the host's:
// on a 2-vCPU Zen 4 the two ran level on one thread and the own product
// 10-20% faster on two (bench/data/runtime-compare.md); OpenBLAS's core may
// be below the CPU's (BlasCoreBelowCpu), or a Xeon's two AVX-512
// multiply-add ports may favour either.
PromptGemmTuning TunePromptGemm(const std::vector<at::Tensor>& matrices);

// For reports, who computes a prompt's products: BlasCoreDescription(),
// followed by ", computed by hilnas's AVX-512 kernel instead" when
// UseOwnPromptGemm() (and " (HILNAS_PROMPT_GEMM=own)" when forced).
std::string PromptKernelsDescription();

// out [m, n] = x [m, k] @ w [n, k]^T, row-major and contiguous, x and out
// f32, w as `weights` says. The output columns are split over ATen's thread
// pool as PooledSgemm splits them. Every output is one running sum of
// x's row times w's row in k's order (fused multiply-adds), as OpenBLAS's
// AVX-512 kernels sum, so results agree with OpenBLAS's to rounding and do
// not depend on the thread count. Returns false, computing nothing, when
// !OwnPromptGemmAvailable() or a size is below 1.
bool OwnPromptGemm(const float* x, const void* w, GemmWeights weights, int64_t m, int64_t n,
                   int64_t k, float* out);

// Products OwnPromptGemm has computed in this process (tests: that a
// prompt's products ran on it).
int64_t OwnPromptGemmCalls();

}  // namespace hilnas

#endif  // HILNAS_MODEL_PROMPT_GEMM_H_
