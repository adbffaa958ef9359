#include "device_agent/environment.h"

#include <sched.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace hilnas {
namespace {

std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

// "key: value" lines of /proc files.
std::string ProcField(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (absl::StripAsciiWhitespace(line.substr(0, colon)) == key) {
      return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "";
}

int64_t KibField(const std::string& path, const std::string& key) {
  int64_t kib = 0;
  const std::string field = ProcField(path, key);
  absl::string_view v = field;
  absl::ConsumeSuffix(&v, " kB");
  return absl::SimpleAtoi(v, &kib) ? kib * 1024 : 0;
}

}  // namespace

DeviceIdentity ProbeDevice() {
  DeviceIdentity d;
  std::string soc = ProcField("/proc/cpuinfo", "model name");
  if (soc.empty()) soc = ProcField("/proc/cpuinfo", "Hardware");  // ARM / Android
  d.set_soc(soc.empty() ? "unknown" : soc);
  d.set_cores(static_cast<int>(std::thread::hardware_concurrency()));
  d.set_memory_bytes(KibField("/proc/meminfo", "MemTotal"));
  utsname u{};
  if (uname(&u) == 0) d.set_os(absl::StrCat(u.sysname, " ", u.release, " ", u.machine));
  d.set_governor(FirstLine("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"));
#ifdef NDEBUG
  d.set_build_type("Release");
#else
  d.set_build_type("Debug");
#endif
  return d;
}

double CpuTemperatureC() {
  double hottest = 0;
  std::error_code ec;
  for (const auto& zone : std::filesystem::directory_iterator("/sys/class/thermal", ec)) {
    if (zone.path().filename().string().rfind("thermal_zone", 0) != 0) continue;
    int64_t milli = 0;
    if (absl::SimpleAtoi(FirstLine((zone.path() / "temp").string()), &milli)) {
      hottest = std::max(hottest, milli / 1000.0);
    }
  }
  return hottest;
}

int64_t MemAvailableBytes() { return KibField("/proc/meminfo", "MemAvailable"); }

int64_t PeakRssBytes() { return KibField("/proc/self/status", "VmHWM"); }

bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

absl::StatusOr<std::vector<int>> ParseCpuSet(const std::string& cpu_set) {
  std::vector<int> cpus;
  for (absl::string_view part : absl::StrSplit(cpu_set, ',', absl::SkipEmpty())) {
    std::vector<absl::string_view> ends = absl::StrSplit(part, '-');
    int lo = 0, hi = 0;
    const bool ok = ends.size() <= 2 && absl::SimpleAtoi(ends[0], &lo) &&
                    absl::SimpleAtoi(ends.back(), &hi) && lo >= 0 && lo <= hi && hi < CPU_SETSIZE;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("cpu set \"", cpu_set, "\": \"", part, "\" is not N or N-M"));
    }
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  if (cpus.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("cpu set \"", cpu_set, "\" names no CPU"));
  }
  return cpus;
}

absl::Status PinToCpuSet(const std::string& cpu_set) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuSet(cpu_set);
  if (!cpus.ok()) return cpus.status();
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int c : *cpus) CPU_SET(c, &mask);
  if (sched_setaffinity(0, sizeof(mask), &mask) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cpu set \"", cpu_set, "\": sched_setaffinity failed (",
                     std::thread::hardware_concurrency(), " CPUs online)"));
  }
  return absl::OkStatus();
}

}  // namespace hilnas
