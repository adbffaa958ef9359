#include "util/cpu_caches.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace hilnas {
namespace {

constexpr int kMaxCpu = 65535;
constexpr int kMaxIndex = 16;  // cache directories a CPU has (index0 ..)
constexpr int64_t kMinSize = int64_t{1} << 10, kMaxSize = int64_t{4} << 30;

// A sysfs file's one line, whitespace trimmed; NotFound where it is absent.
absl::StatusOr<std::string> ReadLine(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  return std::string(absl::StripAsciiWhitespace(text.str()));
}

// "48K", "1024K", "32M", "65536": bytes within kMinSize .. kMaxSize.
absl::StatusOr<int64_t> ParseSize(const std::string& path, absl::string_view text) {
  int64_t unit = 1;
  if (!text.empty() && (text.back() == 'K' || text.back() == 'M' || text.back() == 'G')) {
    unit = text.back() == 'K'   ? int64_t{1} << 10
           : text.back() == 'M' ? int64_t{1} << 20
                                : int64_t{1} << 30;
    text.remove_suffix(1);
  }
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n <= 0 || n > kMaxSize / unit || n * unit < kMinSize) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": size \"", text, "\" is not a cache size of 1K to 4G"));
  }
  return n * unit;
}

// The smaller of a level's known shares.
void Smallest(int64_t& level, int64_t share) {
  level = level == 0 ? share : std::min(level, share);
}

CpuCaches SysconfCaches() {
  CpuCaches c;
#if defined(_SC_LEVEL1_DCACHE_SIZE) && defined(_SC_LEVEL2_CACHE_SIZE) && \
    defined(_SC_LEVEL3_CACHE_SIZE)
  // Per core, as CPUID reports it; glibc's aarch64 build answers 0.
  auto size = [](int name) {
    const long v = sysconf(name);
    return v >= kMinSize && v <= kMaxSize ? static_cast<int64_t>(v) : int64_t{0};
  };
  c.l1d = size(_SC_LEVEL1_DCACHE_SIZE);
  c.l2 = size(_SC_LEVEL2_CACHE_SIZE);
  c.l3 = size(_SC_LEVEL3_CACHE_SIZE);
  if (c.l1d != 0 || c.l2 != 0 || c.l3 != 0) c.source = "sysconf";
#endif
  return c;
}

}  // namespace

std::string CacheBytes(int64_t b) {
  if (b == 0) return "unknown";
  if (b % (int64_t{1} << 20) == 0) return absl::StrCat(b >> 20, " MiB");
  if (b % (int64_t{1} << 10) == 0) return absl::StrCat(b >> 10, " KiB");
  return absl::StrCat(b, " B");
}

std::string CpuCaches::Describe() const {
  // sysconf's are a core's caches, shared with whoever shares them.
  const bool shares = absl::StartsWith(source, "sysfs");
  return absl::StrCat("L1d ", CacheBytes(l1d), ", L2 ", CacheBytes(l2), ", L3 ", CacheBytes(l3),
                      shares ? " a thread" : "", " (", source,
                      absl::StartsWith(source, "sysconf") ? ", a core's, shares unknown" : "", ")");
}

absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& text) {
  std::set<int> cpus;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    part = absl::StripAsciiWhitespace(part);
    const std::vector<absl::string_view> ends = absl::StrSplit(part, '-');
    int lo = 0, hi = 0;
    const bool ok = ends.size() <= 2 && absl::SimpleAtoi(ends.front(), &lo) &&
                    absl::SimpleAtoi(ends.back(), &hi) && lo >= 0 && lo <= hi && hi <= kMaxCpu;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("CPU list \"", text, "\": \"", part, "\" is not a CPU or a range of them"));
    }
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  if (cpus.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("CPU list \"", text, "\" is empty"));
  }
  return std::vector<int>(cpus.begin(), cpus.end());
}

absl::StatusOr<CpuCaches> ReadSysfsCaches(const std::string& cpu_root,
                                          const std::vector<int>& cpus) {
  const std::set<int> ours(cpus.begin(), cpus.end());
  CpuCaches out;
  bool described = false;
  for (int cpu : cpus) {
    for (int index = 0; index < kMaxIndex; ++index) {
      const std::string dir = absl::StrCat(cpu_root, "/cpu", cpu, "/cache/index", index);
      absl::StatusOr<std::string> level_text = ReadLine(dir + "/level");
      if (!level_text.ok()) break;  // indexK are numbered from 0 without gaps
      described = true;
      int level = 0;
      if (!absl::SimpleAtoi(*level_text, &level) || level < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, "/level: \"", *level_text, "\" is not a cache level"));
      }
      // A cache without a type or size file (device trees that leave
      // them out) is one whose size is unknown; the others still count.
      absl::StatusOr<std::string> type = ReadLine(dir + "/type");
      if (!type.ok() || *type == "Instruction" || level > 3) continue;
      absl::StatusOr<std::string> size_text = ReadLine(dir + "/size");
      if (!size_text.ok()) continue;
      absl::StatusOr<int64_t> size = ParseSize(dir + "/size", *size_text);
      if (!size.ok()) return size.status();
      // The CPUs of ours that share this cache; a missing list: none but
      // this one.
      int64_t sharers = 1;
      if (absl::StatusOr<std::string> shared = ReadLine(dir + "/shared_cpu_list"); shared.ok()) {
        absl::StatusOr<std::vector<int>> list = ParseCpuList(*shared);
        if (!list.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat(dir, "/shared_cpu_list: ", list.status().message()));
        }
        sharers = std::max<int64_t>(
            1, std::count_if(list->begin(), list->end(), [&](int c) { return ours.count(c); }));
      }
      const int64_t share = *size / sharers;
      Smallest(level == 1 ? out.l1d : level == 2 ? out.l2 : out.l3, share);
    }
  }
  if (!described) {
    return absl::NotFoundError(
        absl::StrCat(cpu_root, ": no cpuN/cache directory for ", cpus.size(), " CPUs"));
  }
  out.source = "sysfs";
  return out;
}

CpuCaches MergeCaches(const absl::StatusOr<CpuCaches>& sysfs, const CpuCaches& sysconf) {
  if (!sysfs.ok()) {
    CpuCaches c = sysconf;
    if (absl::IsInvalidArgument(sysfs.status())) {
      absl::StrAppend(&c.source, "; sysfs passed over: ", sysfs.status().message());
    }
    return c;
  }
  // A level sysfs leaves unknown, sysconf may know (a core's, whole).
  CpuCaches c = *sysfs;
  bool filled = false;
  for (auto level : {&CpuCaches::l1d, &CpuCaches::l2, &CpuCaches::l3}) {
    if (c.*level == 0 && sysconf.*level != 0) {
      c.*level = sysconf.*level;
      filled = true;
    }
  }
  if (filled) c.source = "sysfs, sysconf where it gave no size";
  return c;
}

CpuCaches HostCpuCaches() {
  std::vector<int> cpus = AffinityCpus();
  if (cpus.empty()) cpus.push_back(0);
  return MergeCaches(ReadSysfsCaches("/sys/devices/system/cpu", cpus), SysconfCaches());
}

const CpuCaches& KernelCpuCaches() {
  static const CpuCaches caches = HostCpuCaches();
  return caches;
}

std::string FormatCpuList(const std::vector<int>& cpus) {
  std::vector<std::string> runs;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    runs.push_back(j == i ? absl::StrCat(cpus[i]) : absl::StrCat(cpus[i], "-", cpus[j]));
    i = j + 1;
  }
  return absl::StrJoin(runs, ",");
}

std::vector<int> AffinityCpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  return cpus;
}

}  // namespace hilnas
