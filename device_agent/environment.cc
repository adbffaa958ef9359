#include "device_agent/environment.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "util/cpu_caches.h"

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

int64_t MinorPageFaults() {
  struct rusage usage;
  return getrusage(RUSAGE_SELF, &usage) == 0 ? usage.ru_minflt : 0;
}

bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

absl::StatusOr<std::vector<int>> ParseCpuSet(const std::string& cpu_set) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList(cpu_set);  // util/cpu_caches.h
  if (!cpus.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("cpu set: ", cpus.status().message()));
  }
  if (cpus->back() >= CPU_SETSIZE) {
    return absl::InvalidArgumentError(absl::StrCat("cpu set \"", cpu_set, "\": CPU ", cpus->back(),
                                                   " is past the ", CPU_SETSIZE,
                                                   " a CPU mask holds"));
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

CpuCounters ParseProcStat(const std::string& text, const std::vector<int>& cpus,
                          double ticks_per_s) {
  CpuCounters c;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // "cpu  u n s idle iowait irq softirq steal ..." (all CPUs), "cpuN ..." (one).
    if (line.rfind("cpu", 0) != 0) break;  // the cpu lines come first
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 9) continue;
    const bool total = f[0] == "cpu";
    int cpu = -1;
    if (!total && !absl::SimpleAtoi(f[0].substr(3), &cpu)) continue;
    if (cpus.empty() ? !total : (total || std::find(cpus.begin(), cpus.end(), cpu) == cpus.end())) {
      continue;
    }
    double v[8] = {};
    bool ok = true;
    for (int k = 0; k < 8; ++k) ok = ok && absl::SimpleAtod(f[k + 1], &v[k]);
    if (!ok) continue;
    // user nice system idle iowait irq softirq steal: busy excludes idle,
    // iowait and steal (time the CPU was not ours to run).
    c.busy_s += (v[0] + v[1] + v[2] + v[5] + v[6]) / ticks_per_s;
    c.steal_s += v[7] / ticks_per_s;
    c.cpus += total ? 0 : 1;
    c.readable = true;
  }
  return c;
}

CpuCounters ReadCpuCounters(const std::vector<int>& cpus) {
  std::ifstream in("/proc/stat");
  std::stringstream text;
  text << in.rdbuf();
  CpuCounters c = ParseProcStat(text.str(), cpus, static_cast<double>(sysconf(_SC_CLK_TCK)));
  if (cpus.empty()) c.cpus = static_cast<int>(std::thread::hardware_concurrency());
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  rusage self{}, children{};
  getrusage(RUSAGE_SELF, &self);
  getrusage(RUSAGE_CHILDREN, &children);
  c.own_s = seconds(self.ru_utime) + seconds(self.ru_stime) + seconds(children.ru_utime) +
            seconds(children.ru_stime);
  c.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  return c;
}

RunConditions ConditionsBetween(const CpuCounters& before, const CpuCounters& after) {
  RunConditions r;
  const double wall = after.wall_s - before.wall_s;
  r.set_window_s(wall);
  if (before.readable && after.readable && wall > 0) {
    // Our own time may have run on CPUs outside the set when unpinned; it
    // cannot make others' time negative.
    const double foreign = (after.busy_s - before.busy_s) - (after.own_s - before.own_s);
    r.set_foreign_cores(std::max(0.0, foreign / wall));
    r.set_steal_share(
        std::max(0.0, (after.steal_s - before.steal_s) / (wall * std::max(1, after.cpus))));
  }
  double load = 0;
  std::vector<std::string> parts = absl::StrSplit(FirstLine("/proc/loadavg"), ' ');
  if (!parts.empty() && absl::SimpleAtod(parts[0], &load)) r.set_load_average(load);
  int64_t khz = 0;
  if (absl::SimpleAtoi(FirstLine("/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"), &khz)) {
    r.set_cpu_mhz(khz / 1000.0);
  } else {
    double mhz = 0;  // x86 VMs without cpufreq report it in cpuinfo
    if (absl::SimpleAtod(ProcField("/proc/cpuinfo", "cpu MHz"), &mhz)) r.set_cpu_mhz(mhz);
  }
  r.set_temperature_c(CpuTemperatureC());
  return r;
}

}  // namespace hilnas
