// A decode step allocates nothing but its returned logits (issue 22: keep
// decode allocation-free). This binary replaces the global operator new
// with a counting one; the ATen module path shows the counter works.
#include <torch/torch.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

#include "gtest/gtest.h"
#include "model/decoder.h"
#include "model/test_archs.h"
#include "model/work_split.h"

namespace {
std::atomic<int64_t> news{0};
}  // namespace

// GCC pairs the replaced new with its own idea of delete when it inlines
// library code; both sides here are malloc/free.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t n) {
  news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace hilnas {
namespace {

// operator new calls per decode step, after a prompt and a warm-up step.
double NewsPerStep(Decoder& d, int steps) {
  torch::NoGradGuard no_grad;
  KvCache cache = d.NewCache(1, 64);
  auto logits = d.ForwardCached(torch::randint(0, 50, {1, 8}, torch::kLong), cache, true);
  auto next = torch::zeros({1, 1}, torch::kLong);
  d.ForwardCached(next, cache, true);  // grows the per-thread buffers
  const int64_t before = news.load();
  for (int i = 0; i < steps; ++i) d.ForwardCached(next, cache, true);
  return static_cast<double>(news.load() - before) / steps;
}

TEST(DecodeAllocTest, ADecodeStepAllocatesOnlyItsLogits) {
  at::set_num_threads(2);  // the parallel paths too
  for (ThreadPool pool : {ThreadPool::kOpenMp, ThreadPool::kSpin}) {
    SetThreadPool(pool);  // model/work_split.h
    for (bool half : {false, true}) {
      auto d = Decoder::Create(TinyMixedArch(), 3, torch::kFloat);
      ASSERT_TRUE(d.ok());
      if (half) {
        ASSERT_TRUE(d->StoreWeightsAs(torch::kHalf).ok());
      }
      const double in_place = NewsPerStep(*d, 20);
      d->SetInPlaceDecode(false);
      const double modules = NewsPerStep(*d, 20);
      // The logits tensor: its TensorImpl and StorageImpl, a few more in
      // empty()'s bookkeeping. The module path makes one per intermediate.
      EXPECT_LE(in_place, 6) << (half ? "f16" : "f32") << ", pool " << static_cast<int>(pool);
      std::printf("operator new per step: in place %.1f, modules %.1f\n", in_place, modules);
      EXPECT_GT(modules, 10 * in_place + 20) << (half ? "f16" : "f32");
    }
  }
  SetThreadPool(ThreadPool::kOpenMp);
}

}  // namespace
}  // namespace hilnas
