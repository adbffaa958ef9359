// Wall-clock time as an injectable interface, so lease expiry and heartbeats
// can be tested without sleeping (LevelDB passes an Env for the same reason).
#ifndef HILNAS_UTIL_CLOCK_H_
#define HILNAS_UTIL_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace hilnas {

class Clock {
 public:
  virtual ~Clock() = default;
  // Milliseconds since the Unix epoch. Thread-safe.
  virtual int64_t NowMs() const = 0;
};

class SystemClock : public Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// A clock that moves only when told to. Thread-safe.
class ManualClock : public Clock {
 public:
  explicit ManualClock(int64_t start_ms = 1'700'000'000'000) : now_ms_(start_ms) {}
  int64_t NowMs() const override { return now_ms_.load(); }
  void AdvanceMs(int64_t ms) { now_ms_ += ms; }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace hilnas

#endif  // HILNAS_UTIL_CLOCK_H_
