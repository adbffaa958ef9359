// Self time per op on the calling thread: ATen's RecordFunction callbacks,
// which see every ATen op and hilnas's own kernels (RECORD_FUNCTION in
// model/: hilnas::attention, hilnas::attention_window, hilnas::gemv,
// hilnas::prompt_mm, ...). A nested op's time is counted once, under its
// own name. bench/step_profile's tables and the agents' window pricing
// (device_agent/window_pricing.h) read them.
#ifndef HILNAS_MODEL_OP_TIMES_H_
#define HILNAS_MODEL_OP_TIMES_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace hilnas {

struct OpTime {
  double seconds = 0;  // self time: minus the ops it called
  int64_t calls = 0;
};

// Collects while alive, on the thread that made it: work an op hands to
// other threads counts in the op's own time on this one. One at a time per
// thread; not movable.
class OpTimer {
 public:
  OpTimer();
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  const std::map<std::string, OpTime>& ops() const { return ops_; }
  // Seconds in ops of that name; 0 when none ran.
  double Seconds(absl::string_view name) const;
  void Clear() { ops_.clear(); }

 private:
  struct Hooks;
  std::map<std::string, OpTime> ops_;
  std::unique_ptr<Hooks> hooks_;
};

}  // namespace hilnas

#endif  // HILNAS_MODEL_OP_TIMES_H_
