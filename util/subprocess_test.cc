#include "util/subprocess.h"

#include <gtest/gtest.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdlib>
#include <cstring>

namespace hilnas {
namespace {

// With KeepFreedMemory, a block far above glibc's mmap threshold comes from
// the heap, and freeing it leaves the heap as large: the next block of that
// size reuses those pages (no page faults) instead of mapping fresh ones.
TEST(KeepFreedMemoryTest, BigBlocksStayInTheHeap) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan's allocator takes no mallopt (KeepFreedMemory returns false)";
#elif defined(__GLIBC__)
  ASSERT_TRUE(KeepFreedMemory());
  constexpr size_t kBig = size_t{48} << 20;  // above even glibc's largest moving threshold (32 MiB)
  const struct mallinfo2 before = mallinfo2();
  void* p = std::malloc(kBig);
  ASSERT_NE(p, nullptr);
  std::memset(p, 1, kBig);
  const struct mallinfo2 during = mallinfo2();
  EXPECT_EQ(during.hblkhd, before.hblkhd) << "the block was mapped on its own";
  // From the heap: grown for it, or (after other tests in this process freed
  // as much) reusing what is free there.
  EXPECT_GE(during.arena, kBig);
  std::free(p);
  const struct mallinfo2 after = mallinfo2();
  EXPECT_GE(after.arena, during.arena) << "the heap was trimmed";
  EXPECT_GE(after.fordblks, kBig);
#else
  EXPECT_FALSE(KeepFreedMemory());
#endif
}

}  // namespace
}  // namespace hilnas
