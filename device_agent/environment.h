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
// Resets the high-water mark to the current RSS (Linux clear_refs "5"), so
// each job reports its own peak. Returns false where the kernel refuses.
bool ResetPeakRss();

// "0-1,3" -> {0, 1, 3}. INVALID_ARGUMENT names the bad part.
absl::StatusOr<std::vector<int>> ParseCpuSet(const std::string& cpu_set);
// Pins the calling thread, and every thread it creates afterwards, to the
// CPUs in `cpu_set`. Call before libtorch or gRPC start their threads.
absl::Status PinToCpuSet(const std::string& cpu_set);

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_ENVIRONMENT_H_
