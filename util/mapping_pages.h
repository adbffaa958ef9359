// How the kernel backs one of this process's mappings: resident bytes and
// transparent huge pages, from /proc/self/smaps (Linux, Android included).
#ifndef HILNAS_UTIL_MAPPING_PAGES_H_
#define HILNAS_UTIL_MAPPING_PAGES_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hilnas {

// Of the mapping that holds `addr` (/proc/self/smaps): its resident bytes
// and how many of them lie on transparent huge pages (AnonHugePages). A
// decoder's weights and KV cache ask for huge pages (model/decoder.cc); the
// kernel grants them only where it finds free 2 MiB blocks, and a one-thread
// GEMV streamed 4 KiB-paged weights at 25-27 GB/s against 36-45 on huge
// pages (AMD EPYC Zen 4, bench/data/runtime-compare.md), so a decode timing
// is read beside this. Zeros where smaps is unreadable or no mapping holds
// `addr`.
struct MappingPages {
  int64_t rss_bytes = 0, huge_bytes = 0;
};
MappingPages PagesOfMapping(const void* addr);
// smaps' text -> the figures of the mapping holding `addr`; for tests.
MappingPages ParseSmapsFor(const std::string& text, uintptr_t addr);

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// At least `bytes` of zero-filled anonymous memory, 2 MiB-aligned and
// advised MADV_HUGEPAGE (Debian's default THP mode is "madvise", so nothing
// is huge unless asked; where the kernel has no THP, as most Android
// kernels, the advice is ignored and nothing changes), unmapped when its
// last owner lets go; null under one huge page or when no mapping is to be
// had (callers then keep libtorch's allocations). What a decoder keeps its
// weights and KV caches in (model/decoder.cc), and the benches that time
// its kernels their matrices.
//
// `populate`: fault the whole buffer in now, then ask the kernel to
// collapse any of it that fell back to 4 KiB pages (MADV_POPULATE_WRITE,
// Linux 5.14; MADV_COLLAPSE, 6.1: synchronous, compacting memory where it
// must): a first-touch fault takes a huge page only if one is free at that
// moment, so without this the pages would depend on the machine's
// fragmentation when the process started (`hilnas run` prints what the
// kernel granted: all of them in every process of bench/data's Zen 5 and
// Xeon runs). For buffers that are all written anyway (weights); a KV
// cache is left to fault as it fills. Older kernels refuse both calls and
// nothing changes.
std::shared_ptr<char> HugePageBuffer(size_t bytes, bool populate = false);

}  // namespace hilnas

#endif  // HILNAS_UTIL_MAPPING_PAGES_H_
