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

#include "absl/functional/function_ref.h"

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
// pool's) runs fn(begin, end) inline. fn is borrowed, not copied: a call
// allocates nothing (a decode step allocates only its logits,
// model/decode_alloc_test.cc).
void ParallelFor(int64_t begin, int64_t end, int64_t grain,
                 absl::FunctionRef<void(int64_t, int64_t)> fn);

// Where ParallelFor's shares run (issue 35, item 3).
//
// kOpenMp: at::parallel_for, libgomp's workers; the default.
//
// kSpin: hilnas's own workers. The first share runs on the caller; the
// first exception a share throws is rethrown on the caller once every
// share has ended. The workers spin on one word for about 0.1 ms after
// their last share (as libgomp's do under GOMP_SPINCOUNT 10000,
// util/subprocess.h), a few microseconds when there are more of them than
// CPUs (qemu, a phone's cores shared with its UI), then sleep on a
// condition variable; a call that finds them asleep wakes them and does not
// wait for them: whatever shares are left when the caller runs out are the
// caller's. Written because an empty libgomp region over 2 threads cost
// 3.2 us on a Zen 5 VM even with its workers spinning, against 0.9 us for
// two threads handing work through a counter they spin on, and a decode
// step splits about 21 times (17 products, 4 attention calls). On a Zen 4
// VM (2026-11-28; `attention_bench --split-cost 1`,
// bench/data/runtime-compare.md) an empty split costs 0.07-0.19 us here
// against libgomp's 0.70-0.99, a split of two 2.45 us items 2.80-2.84
// against 3.10-3.42, but libgomp's split is cheap enough there that decode
// steps on 2 threads did not differ beyond the host's noise; so OpenMP
// stays the default until the spin pool is timed on the Zen 5 it was
// written for.
//
// Prompts stay on OpenMP either way (at::parallel_for, ParallelChunks): a
// prompt's layers also run libtorch's own ops, which split over libgomp's
// workers, and each hand-over between two pools leaves one pool's worker
// spinning on the CPU the other's needs; with a prompt's attention on the
// spin pool, window layers' prefill attention read 3-5% slower on the Zen
// 4. A decode step's libtorch ops are too small to split.
//
// HILNAS_THREAD_POOL=openmp|spin (read at the first call) sets it for a
// process, so one build can be timed both ways.
enum class ThreadPool { kOpenMp, kSpin };
void SetThreadPool(ThreadPool pool);
ThreadPool CurrentThreadPool();

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
