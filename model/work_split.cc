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
  auto run_chunk = [&](int64_t c) { fn(c * chunk, std::min(n, (c + 1) * chunk)); };
  static const bool equal_shares = [] {
    const char* v = std::getenv("HILNAS_WORK_SPLIT");
    return v != nullptr && std::string(v) == "static";
  }();
  if (equal_shares) {  // at::parallel_for's contiguous shares, for comparison
    at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) run_chunk(c);
    });
    return;
  }
  std::atomic<int64_t> next{0};
  // One index per thread (grain 1 over `threads` indices); each then takes
  // chunks from the counter until none is left.
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      run_chunk(c);
    }
  });
}

int64_t ChunkFor(int64_t n, int threads, int per_thread, int64_t align, int64_t lo, int64_t hi) {
  align = std::max<int64_t>(align, 1);
  auto div_up = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  auto up_to_align = [&](int64_t v) { return div_up(v, align) * align; };
  const int64_t t = std::max(threads, 1);
  const int64_t low = up_to_align(std::max<int64_t>(lo, 1));
  const int64_t high = std::max(low, hi / align * align);
  int64_t c = std::clamp(up_to_align(div_up(n, t * std::max(per_thread, 1))), low, high);
  // lo gives way where it would leave a thread without a chunk.
  if (div_up(n, c) < t) c = std::min(c, up_to_align(div_up(n, t)));
  return std::max<int64_t>(1, std::min(c, std::max<int64_t>(n, 1)));
}

}  // namespace hilnas
