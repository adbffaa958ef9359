// The memory gate (issue 33): decode of a model whose weights and cache fit
// in the last-level cache is bound by that cache, which on a VM (or a phone
// running other apps) other tenants share. On the EPYC VMs here a plain
// read of 21 MiB varies 1.4-3x from one second to the next with nothing
// else running in the guest, and a candidate's decode moves with it (TTFT,
// compute-bound, does not). Before each timed run the protocol times one
// read of a buffer as large as the run's working set and compares it with
// this agent's baseline for that size; a run is taken only when the probe
// is within the bound (bench/decode_retest.sh shows the figures).
#ifndef HILNAS_DEVICE_AGENT_MEMORY_PROBE_H_
#define HILNAS_DEVICE_AGENT_MEMORY_PROBE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace hilnas {

// The bytes one decode step reads at the most that a probe mirrors: the
// probe stops there, where the working set is far past any last-level
// cache and reads come from DRAM anyway.
inline constexpr int64_t kMaxMemoryProbeBytes = int64_t{64} << 20;

// Times reads of one buffer of `bytes` (64-byte lines, summed so the
// compiler keeps them): the median of `passes` passes, in ms.
class MemoryProbe {
 public:
  explicit MemoryProbe(int64_t bytes);
  int64_t bytes() const { return static_cast<int64_t>(buffer_.size() * sizeof(float)); }
  double TimeMs(int passes = 5);

 private:
  std::vector<float> buffer_;
};

// Each probe size's readings in this process (the newest 500): the
// baseline is their 10th percentile (the fastest while there are at most
// 10), as for the canary: contention only adds time. Thread-safe; one per
// agent, shared by its jobs.
class MemoryProbeHistory {
 public:
  // Records `ms` for `bytes` and returns it over the baseline (>= 1 when
  // the reading is the fastest so far).
  double Add(int64_t bytes, double ms);
  double BaselineMs(int64_t bytes) const;
  int Readings(int64_t bytes) const;

 private:
  mutable absl::Mutex mu_;
  std::map<int64_t, std::deque<double>> readings_ ABSL_GUARDED_BY(mu_);
};

}  // namespace hilnas

#endif  // HILNAS_DEVICE_AGENT_MEMORY_PROBE_H_
