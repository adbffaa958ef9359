// OpenBLAS picks its kernels from the CPU it runs on; hilnas makes sure that
// pick matches what the CPU can do (issue 35: the runtime costs what it costs
// on every CPU it meets).
//
// The prompt's matrix products go to OpenBLAS through libtorch (aten::mm,
// 80-95% of a prefill). Debian 12's OpenBLAS (0.3.21, built DYNAMIC_ARCH)
// chooses its kernels once, when it is loaded, from a table of CPU models,
// and a model newer than the table gets "Prescott" (SSE3) kernels: on an
// Emerald Rapids host (Intel family 6, model 207, AVX-512; a lent device
// machine) a 4-layer d 512 model's f32 prefill of 256 tokens took 246 ms
// against 61 ms with OPENBLAS_CORETYPE=SkylakeX, and llama.cpp's 110 ms
// (bench/data/runtime-compare.md). hilnas's own kernels pick their path from
// the CPU's features at run time; PinBlasCoreToCpu makes OpenBLAS do the same.
#ifndef HILNAS_MODEL_BLAS_CORE_H_
#define HILNAS_MODEL_BLAS_CORE_H_

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"

namespace hilnas {

// The OpenBLAS core a CPU's features call for: "SkylakeX" with AVX-512
// F/CD/BW/DQ/VL (its SGEMM kernels need no more), "Haswell" with AVX2 and
// FMA, "" otherwise (nothing worth pinning).
std::string BlasCoreForFeatures(bool avx512, bool avx2_fma);

// Whether the core OpenBLAS loaded (openblas_get_corename, any case) runs
// kernels at least as wide as `wanted`'s: Cooperlake and SapphireRapids
// cover SkylakeX; those, SkylakeX and Zen cover Haswell.
bool BlasCoreCovers(absl::string_view loaded, absl::string_view wanted);

// Whether the loaded core runs `wanted`'s kernels, no wider (Zen runs
// Haswell's): what a HILNAS_CPU_FEATURES cap asks for (util/cpu_features.h),
// so an AVX-512 host capped at avx2 pins OpenBLAS to Haswell.
bool BlasCoreMatches(absl::string_view loaded, absl::string_view wanted);

// When the BLAS is OpenBLAS and its core falls short of what
// BlasCoreForFeatures asks for this CPU (under a HILNAS_CPU_FEATURES cap:
// is not what the capped features ask for), sets OPENBLAS_CORETYPE to that and
// returns true: the program must re-execute itself for it to count, since
// OpenBLAS reads the variable only when it is loaded (ReexecWithTimingThreads
// takes that as a reason to re-execute; PinBlasCoreToCpu does it alone).
// Returns false and sets nothing when OPENBLAS_CORETYPE is already set (the
// user's choice; HILNAS_BLAS_CORE=auto overrides it), when
// HILNAS_BLAS_CORE=keep, or after one re-execution.
bool SetBlasCoreForCpu();

// SetBlasCoreForCpu, then the re-execution (/proc/self/exe, same arguments
// and environment) when it asks for one; if execv fails the program goes on
// with the slow core, and BlasCoreDescription says so.
void PinBlasCoreToCpu(char** argv);

// The re-execution alone, for a caller that ran SetBlasCoreForCpu itself.
void ReexecForBlasCore(char** argv);

// Whether the BLAS is OpenBLAS and the core it loaded runs narrower
// kernels than BlasCoreForFeatures asks for this CPU (after any pinning):
// model/prompt_gemm.h then runs prompts' products itself.
bool BlasCoreBelowCpu();

// For reports: "OpenBLAS SkylakeX (pinned by hilnas: OpenBLAS chose
// Prescott)", "OpenBLAS Cooperlake", "OpenBLAS Prescott (below this CPU's
// SkylakeX: OPENBLAS_CORETYPE ...)", "OpenBLAS SkylakeX (wider than the
// cap's Haswell: OPENBLAS_CORETYPE ...)", or "not OpenBLAS".
std::string BlasCoreDescription();

// out [m, n] = x [m, k] @ w [n, k]^T (row-major, contiguous f32) with the
// output columns split over ATen's thread pool, one single-threaded OpenBLAS
// call per thread; OpenBLAS's own workers sit the product out (its thread
// count is left at 1 afterwards; OpenBlasThreadsScope gives them back). One pool runs
// every op of a prompt, as llama.cpp's does: with OpenBLAS threading its own
// products, its workers spin between them while ATen's pool runs the
// attention, norms and activations, and a 2-thread prompt scaled 1.75x where
// llama.cpp's scales 1.9x (bench/gemm_threads: one full4 layer's products
// 1.80x with OpenBLAS's workers, 1.93x pooled, on an AMD EPYC). Every
// output is one dot product of one call, as in OpenBLAS's own split: the
// results agree with libtorch's to rounding (BlasCoreTest) and the demo
// backbone's held-out loss is unchanged. Returns false, computing nothing,
// when the BLAS is not OpenBLAS or the product is empty.
bool PooledSgemm(const float* x, const float* w, int64_t m, int64_t n, int64_t k, float* out);

// Whether PooledSgemm splits an m x n product along x's rows (then every
// OpenBLAS call reads all of w) rather than along w's: when x has more rows
// than w. Each call packs the whole of the operand it does not split, so the
// split runs along the longer side.
bool PooledSplitsAlongRows(int64_t m, int64_t n);

// PooledSgemm over a weight stored in another type (f16 or bf16, model/
// decoder_layers.cc): widen(first, last, buf) writes w's rows [first, last)
// as f32 into buf ((last - first) * k floats). Each thread widens the rows
// its own OpenBLAS call multiplies, right before the call, into a buffer of
// its own that is still in its cache when OpenBLAS packs it. A separate pass
// widening the whole matrix before every product cost 5.5 ms of a 2-thread
// 256-token f16 prefill of 80 on a Zen 3 (bench/data/runtime-compare.md).
// The buffers are the threads' own and kept (n * k floats at most): callers
// keep large matrices off this path. The same calls on the same values as
// PooledSgemm over the widened matrix, so the same bits. Returns false
// without calling widen where PooledSgemm would, and where the product
// splits along x's rows (PooledSplitsAlongRows: every call reads all of w,
// so the caller widens it once, as model/decoder_layers.cc's Widened does).
using WeightRowsToF32 = absl::FunctionRef<void(int64_t first, int64_t last, float* buf)>;
bool PooledSgemmWidened(const float* x, WeightRowsToF32 widen, int64_t m, int64_t n, int64_t k,
                        float* out);

// OpenBLAS's own thread count (openblas_get_num_threads /
// openblas_set_num_threads, looked up at run time): 0, and setting does
// nothing, when the BLAS is not OpenBLAS.
int OpenBlasThreads();
void SetOpenBlasThreads(int threads);

// While one lives, PooledSgemm declines (returns false) and OpenBLAS has the
// threads it had before PooledSgemm set it to one: for training, whose
// backward products go to OpenBLAS through autograd, and whose evaluations
// and teacher forwards between steps would otherwise switch it back and
// forth.
class OpenBlasThreadsScope {
 public:
  OpenBlasThreadsScope();
  ~OpenBlasThreadsScope();
  OpenBlasThreadsScope(const OpenBlasThreadsScope&) = delete;
  OpenBlasThreadsScope& operator=(const OpenBlasThreadsScope&) = delete;
};

}  // namespace hilnas

#endif  // HILNAS_MODEL_BLAS_CORE_H_
