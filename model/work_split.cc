#include "model/work_split.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <string>

namespace hilnas {

void ParallelChunks(int64_t n, int64_t chunk, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t chunks = (n - 1) / chunk + 1;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), chunks);
  if (threads <= 1 || at::in_parallel_region()) {
    fn(0, n);
    return;
  }
  static const bool equal_shares = [] {
    const char* v = std::getenv("HILNAS_WORK_SPLIT");
    return v != nullptr && std::string(v) == "static";
  }();
  if (equal_shares) {  // at::parallel_for's contiguous shares, for comparison
    at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) fn(c * chunk, std::min(n, (c + 1) * chunk));
    });
    return;
  }
  std::atomic<int64_t> next{0};
  // One index per thread (grain 1 over `threads` indices); each then takes
  // chunks from the counter until none is left.
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      fn(c * chunk, std::min(n, (c + 1) * chunk));
    }
  });
}

int64_t ChunkFor(int64_t n, int threads, int per_thread, int64_t align, int64_t lo, int64_t hi) {
  align = std::max<int64_t>(align, 1);
  const int64_t parts =
      std::max<int64_t>(1, int64_t{std::max(threads, 1)} * std::max(per_thread, 1));
  int64_t c = (n + parts - 1) / parts;
  c = (c + align - 1) / align * align;
  const int64_t low = (std::max<int64_t>(lo, 1) + align - 1) / align * align;
  const int64_t high = std::max(low, hi / align * align);
  c = std::clamp(c, low, high);
  // lo gives way where it would leave a thread without a chunk.
  const int64_t t = std::max(threads, 1);
  if ((n + c - 1) / c < t) c = std::min(c, ((n + t - 1) / t + align - 1) / align * align);
  return std::max<int64_t>(1, std::min(c, std::max<int64_t>(n, 1)));
}

}  // namespace hilnas
