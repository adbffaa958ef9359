#include "util/mapping_pages.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

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

}  // namespace hilnas
