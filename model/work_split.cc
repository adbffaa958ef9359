#include "model/work_split.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/median.h"

namespace hilnas {
namespace {

thread_local bool in_pool_share = false;

// CPUs this process may run on (its affinity mask, which a pinned agent
// narrows), at least 1.
unsigned UsableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

// The pool ParallelFor runs on: HILNAS_THREAD_POOL's value at the first
// call, OpenMP when unset, until SetThreadPool.
std::atomic<ThreadPool>& CurrentPool() {
  static std::atomic<ThreadPool> pool{[] {
    const absl::StatusOr<std::optional<ThreadPool>> named = ThreadPoolFromEnvironment();
    if (!named.ok()) {  // tools refuse to start on it (Cli::Main); a library says so
      std::fprintf(stderr, "hilnas: %s; using openmp\n",
                   std::string(named.status().message()).c_str());
      return ThreadPool::kOpenMp;
    }
    return named->value_or(ThreadPool::kOpenMp);
  }()};
  return pool;
}

// Workers that take a call's parts from a counter (model/work_split.h,
// ParallelFor). One call at a time: a second caller waits for the first.
//
// state_ holds the call's number (high 32 bits), whether it still admits
// workers (bit 31) and how many have joined it (low 31 bits). A worker
// joins by compare-and-swap on the number it saw while the call admits;
// the caller, out of parts, closes the call and waits for the workers that
// joined to leave. A worker that wakes late finds the call closed and
// touches nothing of it, so the caller never waits for a sleeping worker
// and the next call may rewrite the call's fields.
class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool;  // never destroyed: workers may sleep past exit
    return *pool;
  }

  void Run(int parts, absl::FunctionRef<void(int)> part) {
    std::lock_guard<std::mutex> one_call(call_mu_);
    Grow(parts - 1);
    part_ = &part;
    parts_ = parts;
    next_.store(1, std::memory_order_relaxed);
    left_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    const uint64_t call = (state_.load(std::memory_order_relaxed) >> 32) + 1;
    state_.store(call << 32 | kAdmits, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      wake_.notify_all();
    }
    Take(0);
    for (int p = next_.fetch_add(1, std::memory_order_relaxed); p < parts;
         p = next_.fetch_add(1, std::memory_order_relaxed)) {
      Take(p);
    }
    const uint64_t joined = state_.fetch_and(~kAdmits, std::memory_order_acq_rel) & kJoined;
    while (left_.load(std::memory_order_acquire) < static_cast<int>(joined)) CpuRelax();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  static constexpr uint64_t kAdmits = uint64_t{1} << 31;
  static constexpr uint64_t kJoined = kAdmits - 1;

  // A part, with its exception kept for the caller.
  void Take(int p) {
    in_pool_share = true;
    try {
      (*part_)(p);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    in_pool_share = false;
  }

  void Grow(int workers) {
    if (static_cast<int>(workers_) >= workers) return;
    while (static_cast<int>(workers_) < workers) {
      // From the last call's number: the call about to be posted is its.
      std::thread(&Pool::Work, this, state_.load(std::memory_order_relaxed) >> 32).detach();
      ++workers_;
    }
    // More workers than CPUs (qemu on a small host, a phone's cores taken
    // by its UI): spin briefly, as libgomp drops GOMP_SPINCOUNT to 1000
    // when oversubscribed. Read when the pool grows, not on every call
    // (a system call).
    spin_us_.store(workers_ + 1 > UsableCpus() ? 5 : 100, std::memory_order_relaxed);
  }

  void Work(uint64_t seen) {
    for (;;) {
      uint64_t s = state_.load(std::memory_order_acquire);
      if ((s >> 32) == seen) {
        s = Wait(seen);
      }
      seen = s >> 32;
      // Join while the call admits; a closed call is left alone.
      while ((s >> 32) == seen && (s & kAdmits) != 0 &&
             !state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                           std::memory_order_acquire)) {
      }
      if ((s >> 32) != seen || (s & kAdmits) == 0) continue;
      for (int p = next_.fetch_add(1, std::memory_order_relaxed); p < parts_;
           p = next_.fetch_add(1, std::memory_order_relaxed)) {
        Take(p);
      }
      left_.fetch_add(1, std::memory_order_release);
    }
  }

  // Spins, then sleeps, until a call after `seen` is posted; returns state_.
  uint64_t Wait(uint64_t seen) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::microseconds(spin_us_.load(std::memory_order_relaxed));
    for (int i = 1;; ++i) {
      const uint64_t s = state_.load(std::memory_order_acquire);
      if ((s >> 32) != seen) return s;
      CpuRelax();
      if (i % 64 == 0 && std::chrono::steady_clock::now() > until) break;
    }
    std::unique_lock<std::mutex> lock(sleep_mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    uint64_t s;
    wake_.wait(lock, [&] {
      s = state_.load(std::memory_order_seq_cst);
      return (s >> 32) != seen;
    });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return s;
  }

  std::mutex call_mu_;
  unsigned workers_ = 0;  // under call_mu_
  // Each on a cache line of its own: the caller spins on left_ while a
  // worker takes parts from next_.
  alignas(64) std::atomic<uint64_t> state_{0};
  alignas(64) std::atomic<int> next_{0};
  alignas(64) std::atomic<int> left_{0};
  // Written only while no worker has joined.
  alignas(64) const absl::FunctionRef<void(int)>* part_ = nullptr;
  int parts_ = 0;
  std::mutex error_mu_;
  std::exception_ptr error_;
  std::atomic<unsigned> spin_us_{100};
  std::mutex sleep_mu_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

}  // namespace

const char* ThreadPoolName(ThreadPool pool) {
  return pool == ThreadPool::kSpin ? "spin" : "openmp";
}

absl::StatusOr<std::optional<ThreadPool>> ThreadPoolFromEnvironment() {
  const char* v = std::getenv("HILNAS_THREAD_POOL");
  if (v == nullptr) return std::optional<ThreadPool>();
  for (ThreadPool p : {ThreadPool::kOpenMp, ThreadPool::kSpin}) {
    if (std::string(v) == ThreadPoolName(p)) return std::optional<ThreadPool>(p);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("HILNAS_THREAD_POOL=", v, " is neither openmp nor spin"));
}

void SetThreadPool(ThreadPool pool) { CurrentPool().store(pool, std::memory_order_relaxed); }

ThreadPool CurrentThreadPool() { return CurrentPool().load(std::memory_order_relaxed); }

bool InParallelRegion() { return in_pool_share || at::in_parallel_region(); }

void ParallelFor(int64_t begin, int64_t end, int64_t grain,
                 absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (begin >= end) return;
  if (CurrentThreadPool() == ThreadPool::kOpenMp) {
    return at::parallel_for(begin, end, grain, fn);
  }
  grain = std::max<int64_t>(grain, 1);
  const int64_t range = end - begin;
  const int64_t parts = std::min<int64_t>(at::get_num_threads(), (range - 1) / grain + 1);
  if (parts <= 1 || InParallelRegion()) {
    fn(begin, end);
    return;
  }
  // at::parallel_for's shares: ceil(range / parts) each, the last short.
  const int64_t share = (range - 1) / parts + 1;
  Pool::Get().Run(static_cast<int>(parts), [&](int p) {
    const int64_t first = begin + p * share;
    if (first < end) fn(first, std::min(end, first + share));
  });
}

void ParallelChunks(int64_t n, int64_t chunk, absl::FunctionRef<void(int64_t, int64_t)> fn) {
  if (n <= 0) return;
  chunk = std::max<int64_t>(chunk, 1);
  const int64_t chunks = (n - 1) / chunk + 1;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), chunks);
  if (threads <= 1 || at::in_parallel_region()) {
    fn(0, n);
    return;
  }
  auto run_chunk = [&](int64_t c) { fn(c * chunk, std::min(n, (c + 1) * chunk)); };
  static const bool equal_shares = [] {
    const char* v = std::getenv("HILNAS_WORK_SPLIT");
    return v != nullptr && std::string(v) == "static";
  }();
  if (equal_shares) {  // at::parallel_for's contiguous shares, for comparison
    at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) run_chunk(c);
    });
    return;
  }
  std::atomic<int64_t> next{0};
  // One index per thread (grain 1 over `threads` indices); each then takes
  // chunks from the counter until none is left.
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next.fetch_add(1, std::memory_order_relaxed)) {
      run_chunk(c);
    }
  });
}

ThreadPool ChooseThreadPool(double openmp_ms, double spin_ms) {
  return spin_ms > 0 && openmp_ms > 0 && spin_ms < openmp_ms * (1 - kThreadPoolMargin)
             ? ThreadPool::kSpin
             : ThreadPool::kOpenMp;
}

std::string ThreadPoolTuning::Describe() const {
  if (!fixed.empty()) return absl::StrCat(ThreadPoolName(chosen), " (", fixed, ")");
  return absl::StrFormat(
      "%s (a decode step %.3f ms on openmp, %.3f on spin: medians of %d rounds of %d steps on %d "
      "threads; tuned in %.2f s)",
      ThreadPoolName(chosen), openmp_ms, spin_ms, rounds, steps_a_round, threads, seconds);
}

namespace {

double MillisecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

ThreadPoolTuning TuneThreadPool(absl::FunctionRef<void()> step) {
  ThreadPoolTuning t;
  const auto start = std::chrono::steady_clock::now();
  t.threads = at::get_num_threads();
  const absl::StatusOr<std::optional<ThreadPool>> named = ThreadPoolFromEnvironment();
  if (named.ok() && named->has_value()) {
    t.chosen = **named;
    t.fixed = absl::StrCat("HILNAS_THREAD_POOL=", ThreadPoolName(t.chosen));
  } else if (t.threads < 2) {
    t.fixed = "one thread: nothing splits";
  }
  if (!t.fixed.empty()) {
    SetThreadPool(t.chosen);
    return t;
  }
  const ThreadPool pools[2] = {ThreadPool::kOpenMp, ThreadPool::kSpin};
  // Each pool's timing starts kLeadInMs after the switch to it, the calls
  // meanwhile untimed: the other pool's workers go on spinning after their
  // last split, on the CPUs this pool's workers need, and the kernel's
  // scheduler takes a few milliseconds to move this pool's workers off
  // them (on a 2-vCPU Zen 4, probed with splits of two 2 us shares while
  // this was written: a spin-pool split took 2.1 us beyond its shares after
  // 1.2 ms of lead-in in some processes, its worker never in time, and 0.3
  // after 12 ms). A run switches pools once, from its prompt to its decode.
  constexpr double kLeadInMs = 5;
  auto lead_in = [&](absl::FunctionRef<void()> call) {
    const auto t0 = std::chrono::steady_clock::now();
    do {
      call();
    } while (MillisecondsSince(t0) < kLeadInMs);
  };
  // Steps: one untimed on each pool (faults, workers starting), which also
  // sizes the rounds: about 0.4 s in all, 5 to 12 rounds.
  double step_ms = 0;
  for (ThreadPool p : pools) {
    SetThreadPool(p);
    const auto t0 = std::chrono::steady_clock::now();
    step();
    step_ms = std::max(step_ms, MillisecondsSince(t0));
  }
  t.steps_a_round = step_ms > 10 ? 1 : 3;  // a billion-parameter model's steps: 1 a round
  const double round_ms = 2 * (std::max(kLeadInMs, step_ms) + t.steps_a_round * step_ms);
  t.rounds = static_cast<int>(std::clamp(400.0 / round_ms, 5.0, 12.0));
  std::vector<double> ms[2];
  for (int r = 0; r < t.rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const int i = (r + k) % 2;  // each pool leads in turn
      SetThreadPool(pools[i]);
      lead_in(step);
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 0; s < t.steps_a_round; ++s) step();
      ms[i].push_back(MillisecondsSince(t0) / t.steps_a_round);
    }
  }
  t.openmp_ms = Median(ms[0]);
  t.spin_ms = Median(ms[1]);
  t.chosen = ChooseThreadPool(t.openmp_ms, t.spin_ms);
  SetThreadPool(t.chosen);
  t.seconds = MillisecondsSince(start) / 1e3;
  return t;
}

int64_t ChunkFor(int64_t n, int threads, int per_thread, int64_t align, int64_t lo, int64_t hi) {
  align = std::max<int64_t>(align, 1);
  auto div_up = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  auto up_to_align = [&](int64_t v) { return div_up(v, align) * align; };
  const int64_t t = std::max(threads, 1);
  const int64_t low = up_to_align(std::max<int64_t>(lo, 1));
  const int64_t high = std::max(low, hi / align * align);
  int64_t c = std::clamp(up_to_align(div_up(n, t * std::max(per_thread, 1))), low, high);
  // lo gives way where it would leave a thread without a chunk.
  if (div_up(n, c) < t) c = std::min(c, up_to_align(div_up(n, t)));
  return std::max<int64_t>(1, std::min(c, std::max<int64_t>(n, 1)));
}

}  // namespace hilnas
