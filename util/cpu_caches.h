// The data caches a thread of this process can count on, for kernels that
// size their blocks to them (the prompt blocks of model/quant_kernels.cc),
// so that a block tuned on one CPU's cache is not carried to a phone core
// with a quarter of it.
//
// Linux describes each CPU's caches under /sys/devices/system/cpu/cpuN/
// cache/indexK (level, type, size, shared_cpu_list), on x86 hosts and on
// Android phones alike; a core's share is its cache's size over the CPUs
// of this process's affinity set that share that cache (two SMT siblings
// share a core's L2, a phone's two little cores may share one). Where a
// VM or sandbox hides that directory, glibc's sysconf gives the sizes it
// reads from CPUID on x86 (per core, sharing unknown); elsewhere the
// sizes are unknown and the kernels keep their defaults.
#ifndef HILNAS_UTIL_CPU_CACHES_H_
#define HILNAS_UTIL_CPU_CACHES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace hilnas {

struct CpuCaches {
  // Bytes of each level's data (or unified) cache a thread of this process
  // has: the smallest share over the CPUs it may run on; 0 where unknown.
  int64_t l1d = 0, l2 = 0, l3 = 0;
  // "sysfs", "sysfs, sysconf where it gave no size", "sysconf" or
  // "unknown", with why sysfs was passed over where it was malformed.
  std::string source = "unknown";
  // e.g. "L1d 48 KiB, L2 1 MiB, L3 16 MiB a thread (sysfs)", or "... (sysconf,
  // a core's, shares unknown)"; "unknown" for a level that is.
  std::string Describe() const;
};

// 1048576 -> "1 MiB", 49152 -> "48 KiB", 0 -> "unknown".
std::string CacheBytes(int64_t bytes);

// The caches of `cpus` as Linux describes them under `cpu_root` (normally
// /sys/devices/system/cpu). A cache whose type or size file is missing is
// of unknown size (0). NotFound where no CPU of `cpus` has a cache
// directory; InvalidArgument naming the file for a malformed level, size
// or CPU list, or a size outside 1 KiB .. 4 GiB.
absl::StatusOr<CpuCaches> ReadSysfsCaches(const std::string& cpu_root,
                                          const std::vector<int>& cpus);

// "0-3,6" -> {0, 1, 2, 3, 6}; InvalidArgument for anything else (a range
// backwards, a CPU above 65535).
absl::StatusOr<std::vector<int>> ParseCpuList(const std::string& text);
// ParseCpuList's inverse: ascending CPUs as runs, {0, 1, 2, 3, 6} -> "0-3,6";
// {} -> "".
std::string FormatCpuList(const std::vector<int>& cpus);

// The CPUs the calling thread may run on (its affinity mask, which a
// pinned agent or taskset narrows), ascending; empty where the mask cannot
// be read.
std::vector<int> AffinityCpus();

// What sysfs gave, each level it left unknown taken from sysconf's; all
// of sysconf's where sysfs failed (its error in `source` where a file was
// malformed).
CpuCaches MergeCaches(const absl::StatusOr<CpuCaches>& sysfs, const CpuCaches& sysconf);

// This process's: MergeCaches of sysfs for the CPUs of its affinity set
// and of sysconf. Reads the files each call.
CpuCaches HostCpuCaches();

// HostCpuCaches(), read once per process: what the kernels size blocks by.
const CpuCaches& KernelCpuCaches();

}  // namespace hilnas

#endif  // HILNAS_UTIL_CPU_CACHES_H_
