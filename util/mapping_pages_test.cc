#include "util/mapping_pages.h"

#include <sys/mman.h>

#include <cstring>
#include <memory>

#include "gtest/gtest.h"

namespace hilnas {
namespace {

constexpr char kSmaps[] =
    "55d0a0000000-55d0a0021000 r--p 00000000 08:01 123 /usr/bin/hilnas\n"
    "Size:                132 kB\n"
    "Rss:                 128 kB\n"
    "AnonHugePages:         0 kB\n"
    "7f0000000000-7f0003200000 rw-p 00000000 00:00 0 \n"
    "Size:              51200 kB\n"
    "KernelPageSize:        4 kB\n"
    "Rss:               49152 kB\n"
    "AnonHugePages:     45056 kB\n"
    "VmFlags: rd wr mr mw me ac hg\n"
    "7f0003200000-7f0003400000 rw-p 00000000 00:00 0 \n"
    "Rss:                2048 kB\n"
    "AnonHugePages:      2048 kB\n";

TEST(ParseSmapsFor, ReadsTheMappingHoldingTheAddress) {
  const MappingPages p = ParseSmapsFor(kSmaps, 0x7f0001000000);
  EXPECT_EQ(p.rss_bytes, 49152 * 1024);
  EXPECT_EQ(p.huge_bytes, 45056 * 1024);
  // Its end is the next mapping's start.
  EXPECT_EQ(ParseSmapsFor(kSmaps, 0x7f0003200000).huge_bytes, 2048 * 1024);
  EXPECT_EQ(ParseSmapsFor(kSmaps, 0x55d0a0000010).rss_bytes, 128 * 1024);
}

TEST(ParseSmapsFor, NoMappingOrNoTextIsZero) {
  EXPECT_EQ(ParseSmapsFor(kSmaps, 0x1000).rss_bytes, 0);
  EXPECT_EQ(ParseSmapsFor("", 0x7f0001000000).huge_bytes, 0);
  EXPECT_EQ(ParseSmapsFor("garbage-line\nRss: x kB\n", 0).rss_bytes, 0);
}

TEST(PagesOfMapping, CountsThisProcessesTouchedPages) {
  const size_t bytes = size_t{8} << 20, guard = 4096;
  // Between two inaccessible pages: the kernel cannot merge it with a
  // neighbour some other code touched (ASan's, or an earlier test's).
  char* whole = static_cast<char*>(
      mmap(nullptr, bytes + 2 * guard, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(whole, MAP_FAILED);
  char* m = whole + guard;
  ASSERT_EQ(mprotect(m, bytes, PROT_READ | PROT_WRITE), 0);
  EXPECT_EQ(PagesOfMapping(m).rss_bytes, 0);  // nothing touched yet
  std::memset(m, 1, bytes);
  const MappingPages p = PagesOfMapping(m + 4096);
  EXPECT_EQ(p.rss_bytes, static_cast<int64_t>(bytes));
  EXPECT_LE(p.huge_bytes, p.rss_bytes);
  munmap(whole, bytes + 2 * guard);
}

// Under one huge page nothing is mapped (callers keep libtorch's memory);
// above, the buffer is 2 MiB-aligned, zero-filled, and with `populate`
// resident in full before anything writes it.
TEST(HugePageBuffer, AlignedZeroedAndPopulatedWhenAsked) {
  EXPECT_EQ(HugePageBuffer(kHugePageBytes - 1), nullptr);
  const size_t bytes = kHugePageBytes + 4096;
  const std::shared_ptr<char> lazy = HugePageBuffer(bytes);
  const std::shared_ptr<char> eager = HugePageBuffer(bytes, /*populate=*/true);
  ASSERT_NE(lazy, nullptr);
  ASSERT_NE(eager, nullptr);
#ifdef MADV_POPULATE_WRITE
  // Before anything touches either: where this kernel populates on request
  // (Linux 5.14 on) and smaps is readable, the eager buffer is resident in
  // full (both huge pages) and the lazy one is not.
  void* probe = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  const bool populates = madvise(probe, 4096, MADV_POPULATE_WRITE) == 0;
  munmap(probe, 4096);
  const MappingPages eager_pages = PagesOfMapping(eager.get());
  const MappingPages lazy_pages = PagesOfMapping(lazy.get());
  if (populates && eager_pages.rss_bytes > 0) {
    EXPECT_GE(eager_pages.rss_bytes, static_cast<int64_t>(2 * kHugePageBytes));
    EXPECT_LT(lazy_pages.rss_bytes, static_cast<int64_t>(kHugePageBytes));
  }
#endif
  for (const auto& b : {lazy, eager}) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % kHugePageBytes, 0u);
    EXPECT_EQ(b.get()[0], 0);
    EXPECT_EQ(b.get()[bytes - 1], 0);
  }
}

}  // namespace
}  // namespace hilnas
