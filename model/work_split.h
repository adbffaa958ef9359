// Work split over ATen's thread pool by demand rather than in equal shares
// (issue 35, item 3: decode and prefill scale with threads on every CPU).
//
// at::parallel_for gives each thread one contiguous share of equal size, so
// a product or an attention call ends when its slowest thread does. On a
// VM whose vCPUs share host cores with other tenants, and on a phone whose
// 4 threads land on big and little cores (MobileLLM-Flash Sec. 4.2), the
// threads do not run at one speed: on a lent Xeon VM, 2-thread runs of the
// same 2048-token prefill took 486-715 ms and their OpenBLAS products gained
// 1.0-1.3x from the second thread while llama.cpp, whose threads take its
// matrix products' chunks from a shared counter, gained 1.5-1.7x
// (bench/data/runtime-compare.md). Here each thread takes the next chunk
// when it finishes one, as llama.cpp's do.
#ifndef HILNAS_MODEL_WORK_SPLIT_H_
#define HILNAS_MODEL_WORK_SPLIT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace hilnas {

// fn(begin, end) over [0, n) in chunks [c * chunk, min(n, (c + 1) * chunk)),
// each run once, by whichever of ATen's threads is free next; chunk 0 goes
// first, so put the costliest work at the front. One thread, one chunk, or
// a call from inside a parallel region runs them all in order on the
// calling thread. n <= 0 does nothing; chunk < 1 counts as 1.
// HILNAS_WORK_SPLIT=static (read once) gives each thread an equal
// contiguous run of the same chunks instead, at::parallel_for's way, for
// benchmarks that compare the two in one build.
void ParallelChunks(int64_t n, int64_t chunk, absl::FunctionRef<void(int64_t, int64_t)> fn);

// at::parallel_for's contract, for a decode step's splits (its weight
// products and its attention), on the pool SetThreadPool names:
// fn(first, last) over [begin, end) in at most at::get_num_threads() equal
// contiguous shares of at least `grain` (the last one short); one share,
// one thread, or a call from inside a parallel region (ATen's or the spin
// pool's) runs fn(begin, end) inline. On the spin pool a share may reach
// fn in up to 8 pieces, each a whole number of grains but the share's
// last, some run by another thread than the share's own (below): fn must
// give the same result for any split of its range, as every kernel here
// does. fn is borrowed, not copied: a call allocates nothing (a decode
// step allocates only its logits, model/decode_alloc_test.cc).
void ParallelFor(int64_t begin, int64_t end, int64_t grain,
                 absl::FunctionRef<void(int64_t, int64_t)> fn);

// ParallelFor over the rows of matrices laid end to end, rows[m] rows for
// matrix m: one split of their sum, at least `grain` rows a share, and
// fn(m, first, last) for each matrix a share reaches, rows counted from
// matrix m's first. A call's matrices (a layer's q, k and v; its gate and
// up) then cost one hand-over where one each would cost three or two, and
// the threads end together. Allocates nothing, as ParallelFor.
void ParallelForRowsOf(absl::Span<const int64_t> rows, int64_t grain,
                       absl::FunctionRef<void(size_t, int64_t, int64_t)> fn);

// Where ParallelFor's shares run (issue 35, item 3).
//
// kOpenMp: at::parallel_for, libgomp's workers; the default.
//
// kSpin: hilnas's own workers. The first share runs on the caller, share
// w + 1 on worker w, handed over through a cache line of the worker's own
// that carries the share (its bounds and fn) and a line only the worker
// writes back, so that a hand-over moves as few lines between cores as
// two threads spinning on a counter do; the first exception a share throws
// is rethrown on the caller once every share has ended. The workers spin
// on their line for about 0.1 ms after their last share (as libgomp's do
// under GOMP_SPINCOUNT 10000, util/subprocess.h), a few microseconds when
// a call has more threads than there are CPUs (qemu, a phone's cores
// shared with its UI), then sleep on a condition variable. The caller
// never waits on a worker that is not running: a sleeper's share not yet
// claimed when the caller runs out of its own is the caller's, and so is
// a spinning worker's that it has not started 5 us on (the kernel took
// it off its CPU). Nor on one that runs slower than it (a phone's little
// core; a vCPU whose host core's other hyperthread is busy): every thread
// runs a share of more than one grain in up to 8 pieces, and the caller,
// out of its own work, takes the back half of a worker's not started,
// again and again, as llama.cpp's threads take a decode product's rows
// from a shared counter; and a worker, out of its own, takes the caller's
// (the thread that runs the model may be the one on the little core).
// With a worker at a third of the caller's speed, 16 items of 2.4 us took
// 1.01-1.07 times what balanced work would (12 items' time), against
// 1.95-2.09 in whole shares; with the caller at a third of the worker's,
// 1.01-1.07 against 2.18-2.28 (`attention_bench --split-cost 1`).
// Written because an empty libgomp region over 2 threads cost 3.2 us on a
// Zen 5 VM even with its workers spinning, against 0.9 us for two threads
// handing work through a counter they spin on, and a decode step splits
// about 21 times (17 products, 4 attention calls). On a Zen 4 VM
// (2026-11-28; `attention_bench --split-cost 1`,
// bench/data/runtime-compare.md) an empty split costs 0.07-0.19 us here
// against libgomp's 0.70-0.99, a split of two 2.45 us items 2.80-2.84
// against 3.10-3.42, but libgomp's split is cheap enough there that decode
// steps on 2 threads did not differ beyond the host's noise. (Those
// figures are of an earlier form of the pool, whose workers took shares
// from a shared counter and read them from the caller's stack: on a Zen 5
// VM its split of two 2.4 us items took 3.96-4.18 us, the slots'
// 3.42-3.51, and a window layer's 128-key decode attention went from not
// paying to split to paying; bench/data/runtime-compare.md, "The spin
// pool's hand-over".) So neither
// is fixed: OpenMP is the default, and the runtime times both on the model
// at hand before its runs (TuneThreadPool) and keeps the spin pool only
// where it is measurably faster.
//
// Prompts stay on OpenMP either way (at::parallel_for, ParallelChunks): a
// prompt's layers also run libtorch's own ops, which split over libgomp's
// workers, and each hand-over between two pools leaves one pool's worker
// spinning on the CPU the other's needs; with a prompt's attention on the
// spin pool, window layers' prefill attention read 3-5% slower on the Zen
// 4. A decode step's libtorch ops are too small to split.
//
// HILNAS_THREAD_POOL=openmp|spin (read at the first call) sets it for a
// process, so one build can be timed both ways; unset, the runtime times
// both on the model at hand and keeps the faster (TuneThreadPool below).
enum class ThreadPool { kOpenMp, kSpin };
void SetThreadPool(ThreadPool pool);
ThreadPool CurrentThreadPool();
const char* ThreadPoolName(ThreadPool pool);  // "openmp", "spin"
// The pool HILNAS_THREAD_POOL names; nullopt when it is unset.
// INVALID_ARGUMENT naming the variable and its value when it names
// neither (Cli::Main refuses to start then).
absl::StatusOr<std::optional<ThreadPool>> ThreadPoolFromEnvironment();

// Which pool a decode step's splits run on is the host's to decide, as the
// GEMV's form and decode attention's split are (issue 35: nothing tuned to
// one model of CPU): the hand-over libgomp makes cost 0.7-1 us on a 2-vCPU
// Zen 4, where the two pools' decode steps read the same within the host's
// noise, and 3.2 us on a Zen 5 VM, ~21 of them a step. Where another busy
// process shares the CPUs (a phone's UI), an OpenMP split waits for a
// worker the kernel must schedule: on that Zen 4 with a busy loop on one of
// its 2 vCPUs, full4 decoded 2.6-4.2x faster on the spin pool, which the
// tuner kept in every process (bench/data/runtime-compare.md).
struct ThreadPoolTuning {
  ThreadPool chosen = ThreadPool::kOpenMp;
  // Why nothing was timed ("HILNAS_THREAD_POOL=spin", "one thread"); empty
  // when both pools were timed.
  std::string fixed;
  int threads = 1;
  double openmp_ms = 0, spin_ms = 0;  // medians: a decode step's time on each
  int rounds = 0;                     // timed, per pool
  int steps_a_round = 0;              // steps a round's time sums
  double seconds = 0;                 // the tuning's own time
  // E.g. "openmp (a decode step 1.094 ms on openmp, 1.087 on spin: medians
  // of 12 rounds of 3 steps on 2 threads; tuned in 0.31 s)".
  std::string Describe() const;
};

// The tuner's rule: the spin pool when its step's median beats OpenMP's by
// more than kThreadPoolMargin of OpenMP's; else OpenMP (a tie, or noise,
// keeps the default every other part of a run also uses).
constexpr double kThreadPoolMargin = 0.03;
ThreadPool ChooseThreadPool(double openmp_ms, double spin_ms);

// Times `step` (one decode step of the model at hand, say) on each pool at
// the process's threads, in rounds that alternate which pool goes first;
// each pool's part of a round runs the step untimed for 5 ms after the
// switch (the other pool's workers still hold the CPUs meanwhile) and then
// times 3 steps (1 where a step takes over 10 ms); 5 to 12 rounds, about
// 0.3 s in all for small models, 11 steps a pool for large ones. Then
// SetThreadPool(ChooseThreadPool(...)) and returns what it measured. With
// one thread, or a pool HILNAS_THREAD_POOL names, it times nothing and
// sets that pool (OpenMP for one thread: nothing splits).
ThreadPoolTuning TuneThreadPool(absl::FunctionRef<void()> step);

// For tests of the spin pool: `stay_awake` keeps its workers spinning (no
// sleep after their spin); while `hold`, they see their posts but start
// none, as workers the kernel has taken off their CPUs would, so a call's
// shares are all the caller's (a hot share revoked after a few
// microseconds, a cold one taken back). (false, false) is the pool's own
// behaviour.
void SetSpinPoolWorkersForTest(bool stay_awake, bool hold);
// Hot shares (posted to a spinning worker) the spin pool's callers have
// revoked and run themselves, their worker not started a few microseconds
// on, since the process started.
int64_t SpinPoolSharesRevoked();
// Pieces of workers' shares the spin pool's callers have taken and run
// themselves, their worker slower, since the process started.
int64_t SpinPoolPiecesTaken();
// Pieces of callers' shares the spin pool's workers have taken and run,
// their caller slower, since the process started.
int64_t SpinPoolCallersPiecesTaken();

// One pause in a spin-wait: PAUSE on x86, YIELD on arm64.
inline void CpuRelax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// True on a thread inside the spin pool's shares or inside an ATen
// parallel region.
bool InParallelRegion();

// A chunk size that gives each of `threads` threads about `per_thread`
// chunks of [0, n), in multiples of `align` and within [lo, hi] (hi is
// rounded down to a multiple of align, lo up; n's own size when smaller).
// lo gives way where it would leave a thread without a chunk: then each
// thread gets one (n / threads rounded up to align).
int64_t ChunkFor(int64_t n, int threads, int per_thread, int64_t align, int64_t lo, int64_t hi);

}  // namespace hilnas

#endif  // HILNAS_MODEL_WORK_SPLIT_H_
