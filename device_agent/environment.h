// What the agent can read about the device it runs on: identity, CPU
// governor, temperature, memory high-water mark, CPU pinning. Linux /proc
// and /sys (Android included); every reader degrades to an empty or zero
// value where a file is unreadable, never to an error.
#ifndef HILNAS_DEVICE_AGENT_ENVIRONMENT_H_
#define HILNAS_DEVICE_AGENT_ENVIRONMENT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/benchmark.pb.h"

namespace hilnas {

// Name-independent facts: soc (CPU model), cores, memory, os, governor,
// build type. The caller fills name, runtime, threads, cpu_set and pools.
DeviceIdentity ProbeDevice();

// MemAvailable from /proc/meminfo, bytes; 0 when unreadable.
int64_t MemAvailableBytes();

// Hottest thermal zone in degrees Celsius; 0 when none is readable.
double CpuTemperatureC();

// The process's resident-memory high-water mark (VmHWM), bytes.
int64_t PeakRssBytes();
// Minor page faults this process has taken so far (getrusage); 0 where
// unreadable. A run that faults is running on memory fresh from the kernel.
int64_t MinorPageFaults();
// Resets the high-water mark to the current RSS (Linux clear_refs "5"), so
// each job reports its own peak. Returns false where the kernel refuses.
bool ResetPeakRss();

// CPU time counters for telling what else ran during a timed run (the
// quiet-machine gate, issue 18): busy and steal time of `cpus` (all CPUs
// when empty) from /proc/stat, this process's own CPU time and that of its
// finished children (getrusage: an external runtime's runs), and a
// monotonic wall clock. `readable` is false where /proc/stat is not.
struct CpuCounters {
  double busy_s = 0, steal_s = 0, own_s = 0, wall_s = 0;
  int cpus = 0;
  bool readable = false;
};
CpuCounters ReadCpuCounters(const std::vector<int>& cpus);
// /proc/stat's text -> the counters of `cpus` (all when empty), seconds at
// `ticks_per_s`; the parser behind ReadCpuCounters, for tests.
CpuCounters ParseProcStat(const std::string& text, const std::vector<int>& cpus,
                          double ticks_per_s);

// What else used the device between two readings: other processes' CPU
// time (busy minus our own) per wall second, in cores; steal share; and
// the current load average, frequency and temperature.
RunConditions ConditionsBetween(const CpuCounters& before, const CpuCounters& after);

// "0-1,3" -> {0, 1, 3} (ParseCpuList, util/cpu_caches.h), within the CPUs a
// cpu_set_t holds. INVALID_ARGUMENT names the bad part.
absl::StatusOr<std::vector<int>> ParseCpuSet(const std::string& cpu_set);
// Pins the calling thread, and every thread it creates afterwards, to the
// CPUs in `cpu_set`. Call before libtorch or gRPC start their threads.
absl::Status PinToCpuSet(const std::string& cpu_set);

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_ENVIRONMENT_H_
