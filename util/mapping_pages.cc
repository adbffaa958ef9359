#include "util/mapping_pages.h"

#include <sys/mman.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

// glibc 2.36's <sys/mman.h> (Debian 12) names MADV_POPULATE_WRITE but not
// MADV_COLLAPSE, Linux 6.1's asm-generic 25 (the same on every Linux
// architecture, Android's included): a check for both names compiled
// HugePageBuffer's populate step out, so a decoder's weights took huge
// pages only where first-touch faults found them free. Kernels before 6.1
// refuse the call and nothing changes.
#if defined(__linux__) && !defined(MADV_COLLAPSE)
#define MADV_COLLAPSE 25
#endif

namespace hilnas {

MappingPages ParseSmapsFor(const std::string& text, uintptr_t addr) {
  MappingPages pages;
  bool inside = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    // A mapping's header: "start-end perms offset dev inode [path]", hex.
    const size_t dash = line.find('-');
    const size_t space = line.find(' ');
    uint64_t start = 0, end = 0;
    if (dash != absl::string_view::npos && space != absl::string_view::npos && dash < space &&
        absl::SimpleHexAtoi(line.substr(0, dash), &start) &&
        absl::SimpleHexAtoi(line.substr(dash + 1, space - dash - 1), &end)) {
      if (inside) break;  // past the one asked for
      inside = start <= addr && addr < end;
      continue;
    }
    if (!inside) continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t kib = 0;
    if (f.size() != 3 || f[2] != "kB" || !absl::SimpleAtoi(f[1], &kib)) continue;
    if (f[0] == "Rss:") pages.rss_bytes = kib * 1024;
    if (f[0] == "AnonHugePages:") pages.huge_bytes = kib * 1024;
  }
  return pages;
}

MappingPages PagesOfMapping(const void* addr) {
  std::ifstream in("/proc/self/smaps");
  std::stringstream text;
  text << in.rdbuf();
  return ParseSmapsFor(text.str(), reinterpret_cast<uintptr_t>(addr));
}

std::shared_ptr<char> HugePageBuffer(size_t bytes, bool populate) {
  if (bytes < kHugePageBytes) return nullptr;
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const size_t span = rounded + kHugePageBytes;  // room to align the start
  void* mapped = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(mapped);
  char* base =
      reinterpret_cast<char*>((start + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes);
#ifdef MADV_HUGEPAGE
  madvise(base, rounded, MADV_HUGEPAGE);
#endif
#if defined(MADV_POPULATE_WRITE) && defined(MADV_COLLAPSE)
  if (populate && madvise(base, rounded, MADV_POPULATE_WRITE) == 0) {
    madvise(base, rounded, MADV_COLLAPSE);
  }
#else
  (void)populate;
#endif
  return std::shared_ptr<char>(base, [mapped, span](char*) { munmap(mapped, span); });
}

}  // namespace hilnas
