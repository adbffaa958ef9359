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
#include <functional>

namespace hilnas {

// fn(begin, end) over [0, n) in chunks [c * chunk, min(n, (c + 1) * chunk)),
// each run once, by whichever of ATen's threads is free next; chunk 0 goes
// first, so put the costliest work at the front. One thread, one chunk, or
// a call from inside a parallel region runs them all in order on the
// calling thread. n <= 0 does nothing; chunk < 1 counts as 1.
// HILNAS_WORK_SPLIT=static (read once) gives each thread an equal
// contiguous run of the same chunks instead, at::parallel_for's way, for
// benchmarks that compare the two in one build.
void ParallelChunks(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn);

// A chunk size that gives each of `threads` threads about `per_thread`
// chunks of [0, n), in multiples of `align` and within [lo, hi] (hi is
// rounded down to a multiple of align, lo up; n's own size when smaller).
// lo gives way where it would leave a thread without a chunk: then each
// thread gets one (n / threads rounded up to align).
int64_t ChunkFor(int64_t n, int threads, int per_thread, int64_t align, int64_t lo, int64_t hi);

}  // namespace hilnas

#endif  // HILNAS_MODEL_WORK_SPLIT_H_
