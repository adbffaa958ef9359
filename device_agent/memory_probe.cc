#include "device_agent/memory_probe.h"

#include <algorithm>
#include <chrono>

namespace hilnas {

MemoryProbe::MemoryProbe(int64_t bytes)
    : buffer_(static_cast<size_t>(std::clamp<int64_t>(bytes, 4096, kMaxMemoryProbeBytes) /
                                  sizeof(float)),
              1.0f) {}

double MemoryProbe::TimeMs(int passes) {
  std::vector<double> times;
  volatile float sink = 0;
  for (int p = 0; p < std::max(1, passes); ++p) {
    const auto t0 = std::chrono::steady_clock::now();
    float sum = 0;
    for (size_t i = 0; i < buffer_.size(); i += 16) sum += buffer_[i];  // one float per line
    sink = sink + sum;
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

double MemoryProbeHistory::Add(int64_t bytes, double ms) {
  double baseline;
  {
    absl::MutexLock lock(&mu_);
    std::deque<double>& r = readings_[bytes];
    r.push_back(ms);
    if (r.size() > 500) r.pop_front();
  }
  baseline = BaselineMs(bytes);
  return baseline > 0 ? ms / baseline : 1.0;
}

int MemoryProbeHistory::Readings(int64_t bytes) const {
  absl::MutexLock lock(&mu_);
  auto it = readings_.find(bytes);
  return it == readings_.end() ? 0 : static_cast<int>(it->second.size());
}

double MemoryProbeHistory::BaselineMs(int64_t bytes) const {
  absl::MutexLock lock(&mu_);
  auto it = readings_.find(bytes);
  if (it == readings_.end() || it->second.empty()) return 0;
  std::vector<double> v(it->second.begin(), it->second.end());
  const size_t k = (v.size() - 1) / 10;
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

}  // namespace hilnas
