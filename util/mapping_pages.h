// How the kernel backs one of this process's mappings: resident bytes and
// transparent huge pages, from /proc/self/smaps (Linux, Android included).
#ifndef HILNAS_UTIL_MAPPING_PAGES_H_
#define HILNAS_UTIL_MAPPING_PAGES_H_

#include <cstdint>
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

}  // namespace hilnas

#endif  // HILNAS_UTIL_MAPPING_PAGES_H_
