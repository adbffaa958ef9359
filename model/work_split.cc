#include "model/work_split.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "util/cpu_caches.h"
#include "util/median.h"

namespace hilnas {
namespace {

thread_local bool in_pool_share = false;

// SetSpinPoolWorkersForTest's: workers that never sleep, and that see a
// post but start nothing.
std::atomic<bool> awake_workers{false}, hold_workers{false};
// SpinPoolSharesRevoked's, SpinPoolPiecesTaken's and
// SpinPoolCallersPiecesTaken's counts.
std::atomic<int64_t> revoked{0}, pieces_taken{0}, callers_pieces_taken{0};

// CPUs this process may run on (its affinity mask, which a pinned agent
// narrows), at least 1.
unsigned UsableCpus() {
  const size_t cpus = AffinityCpus().size();
  if (cpus > 0) return static_cast<unsigned>(cpus);
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

// Workers that each take one share of a call from a slot of their own
// (model/work_split.h, ParallelFor). One call at a time: a second caller
// waits for the first.
//
// A hand-over between cores is paid in cache-line transfers, a few hundred
// nanoseconds each on a VM, and a split costs the transfers on the way
// from the caller's post to its seeing the last share done. So a share
// moves as two threads hand work through words they spin on (the floor
// `attention_bench --split-cost 1` measures): each worker's slot has a
// line only the caller writes, the post (the call's number, and the share
// itself: its bounds and the caller's function, by value, not through the
// caller's stack), and a line only the worker writes, its state (the last
// call it finished, and whether it sleeps). A post to a spinning worker is
// seen, run and marked done with no other line of the pool's moved
// between the cores. Through a shared counter of parts, join and leave
// counts, and the share's bounds read from the caller's frames, a split of
// two 2.4 us items took 1.6-1.8 us more than one item on a Zen 5 VM, and
// 1.0-1.1 us this way (bench/data/runtime-compare.md, "The spin pool's
// hand-over").
//
// The caller never waits on a worker that is not running:
// - A worker about to sleep says so in its state first, and a post to a
//   sleeping worker is cold: the worker claims it by compare-and-swap on
//   a third word once awake, and the caller, out of its own work, takes
//   back every cold share not yet claimed.
// - A worker the kernel took off its CPU while it spun (another process
//   on that CPU: a phone's UI, a VM's neighbour) has a hot post it has not
//   started. Before it runs a hot share a worker writes the call's number
//   to a word of its own (start); a caller that has waited kRevokeAfter
//   for a share revokes the post, reads start, and publishes who owns the
//   share: the worker if it had started, else the caller, which runs it.
//   Both sides write, then read the other's word (seq_cst), so at least
//   one sees the other; a worker that sees the revocation waits for the
//   verdict.
// Nor on a worker that runs slower than it (a phone's little core): a
// worker runs a share of more than one grain in up to kPiecesAShare pieces
// taken from the front of a word beside its state, and the caller, out of
// its own work, takes the back half of the pieces not started, until none
// is left; a worker then holds the call for at most the piece it runs.
// The same the other way round, for a caller slower than its workers (the
// thread that runs the model landed on a little core): the caller runs its
// share in pieces from a word of its own, and a worker, once it has said
// its share is done, takes the back half of the caller's pieces not
// started, until none is left, and counts those it ran where the caller
// waits for them. Said done first, so that a worker that finds nothing to
// take (threads at one speed) has not held the call for the line it read.
// A worker reads a share only when it may run it; a call's number in each
// word keeps an old post, claim, start or piece from being read as a
// newer one.
class Pool {
 public:
  using Fn = absl::FunctionRef<void(int64_t, int64_t)>;

  static Pool& Get() {
    static Pool* pool = new Pool;  // never destroyed: workers may sleep past exit
    return *pool;
  }

  // fn over [begin, end) in `parts` shares of `share` (the last short):
  // share 0 on the caller, share w + 1 on worker w, each in pieces of at
  // least `grain`.
  void Run(int parts, int64_t begin, int64_t end, int64_t share, int64_t grain, Fn fn) {
    std::lock_guard<std::mutex> one_call(call_mu_);
    Grow(parts - 1);
    if (error_) error_ = nullptr;
    const uint64_t call = ++calls_;
    const int helpers = parts - 1;
    // More threads in this call than CPUs (qemu on a small host, a
    // phone's cores taken by its UI): the workers spin briefly after it,
    // as libgomp drops GOMP_SPINCOUNT to 1000 when oversubscribed.
    const unsigned spin_us = static_cast<unsigned>(parts) > cpus_ ? 5 : 100;
    const int64_t piece = PieceSize(share, grain);
    mine_ = Pieces(begin, std::min(end, begin + share), piece);
    // The caller's pieces' word before the posts: a worker may take from
    // it once done. A share of one piece leaves its line alone: a worker
    // read it after the call before, and a 2-item attention split would
    // wait to own it again.
    if (mine_.count > 1) {
      mine_done_.store(0, std::memory_order_relaxed);  // no worker runs a piece of an older call
      Open(mine_left_, mine_, call);
    }
    for (int w = 0; w < helpers; ++w) {
      Slot& s = *slots_[w];
      s.fn.emplace(fn);
      s.share = Pieces(std::min(end, begin + (w + 1) * share),
                       std::min(end, begin + (w + 2) * share), piece);
      s.callers_pieces = mine_.count;
      s.spin_us.store(spin_us, std::memory_order_relaxed);
      // Read before the post, as the worker writes its state before it
      // reads the post: one of the two sees the other (both seq_cst).
      cold_[w] = (s.state.load(std::memory_order_seq_cst) & kAsleep) != 0;
      s.post.store(call << kPostBits | (cold_[w] ? kCold : kHot), std::memory_order_seq_cst);
    }
    if (sleepers_.load(std::memory_order_seq_cst) > 0) {
      std::lock_guard<std::mutex> lock(sleep_mu_);
      wake_.notify_all();
    }
    // The caller's own share; the pieces of it workers took, to wait for.
    const int64_t given = RunPieces(mine_left_, mine_, fn);
    for (int w = 0; w < helpers; ++w) {
      Slot& s = *slots_[w];
      taken_[w] = cold_[w] && Claim(s, call, /*by_caller=*/true);
      if (taken_[w]) Take(fn, s.share.first, s.share.last);
    }
    // Pieces the workers have not started, the back half of each share's
    // at a time, round the workers until none is left to take.
    for (bool took = true; took;) {
      took = false;
      for (int w = 0; w < helpers; ++w) {
        if (!taken_[w] && slots_[w]->share.count > 1) {
          took |= TakeWorkersPieces(*slots_[w], call, fn) == kTook;
        }
      }
    }
    for (int w = 0; w < helpers; ++w) {
      if (taken_[w]) continue;
      Slot& s = *slots_[w];
      // A cold share was claimed (the worker is running it) or is a hot
      // one's, which may be revoked once, after kRevokeAfter. Pieces the
      // worker has not started are the caller's to take meanwhile.
      bool may_revoke = !cold_[w];
      bool may_take = s.share.count > 1;
      std::optional<std::chrono::steady_clock::time_point> since;  // the first look at the clock
      for (int i = 1; s.state.load(std::memory_order_acquire) >> 1 != call; ++i) {
        CpuRelax();
        if (i % 64 != 0) continue;
        if (may_take) {
          const Taken t = TakeWorkersPieces(s, call, fn);
          if (t == kTook) continue;
          may_take = t == kNotStarted;
        }
        if (!may_revoke) continue;
        const auto now = std::chrono::steady_clock::now();
        if (!since) {
          since = now;
        } else if (now - *since > kRevokeAfter) {
          may_revoke = false;
          if (Revoke(s, call)) {
            revoked.fetch_add(1, std::memory_order_relaxed);
            Take(fn, s.share.first, s.share.last);
            break;
          }
        }
      }
    }
    // Pieces of the caller's share a worker took are run by it (it took
    // them as it ran: it holds the call at most for them).
    if (given > 0) {
      while (mine_done_.load(std::memory_order_acquire) < given) CpuRelax();
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Slot::post: the call's number << kPostBits | one of these.
  static constexpr int kPostBits = 3;
  static constexpr uint64_t kPostState = (uint64_t{1} << kPostBits) - 1;
  static constexpr uint64_t kHot = 0;         // to a spinning worker
  static constexpr uint64_t kCold = 1;        // to a sleeping one: claimed first
  static constexpr uint64_t kRevoking = 2;    // a hot share the caller has waited on
  static constexpr uint64_t kCallerOwns = 3;  // revoked before the worker started
  static constexpr uint64_t kWorkerOwns = 4;  // revoked, but the worker had started
  static constexpr uint64_t kAsleep = 1;      // in Slot::state
  // How long the caller, out of its own work, waits on a hot share before
  // it asks whether the worker has started: past the few hundred
  // nanoseconds a spinning worker takes to see a post, short of a
  // scheduler's tick (milliseconds), which a worker taken off its CPU
  // waits for.
  static constexpr std::chrono::microseconds kRevokeAfter{5};
  // Pieces a worker's share is run in, so that a caller out of its own
  // work takes what a slower worker has not started (a phone's little
  // core, a vCPU whose host core's other hyperthread is busy), as
  // llama.cpp's threads take a decode product's rows 64 at a time from a
  // shared counter, but through a word in the worker's own cache line. (A
  // worker the kernel takes off its CPU mid-piece still holds the call
  // until it is back: pieces do not help there.)
  static constexpr int64_t kPiecesAShare = 8;

  // A share [first, last) in `count` pieces of `piece` (the last short).
  struct Pieces {
    Pieces() = default;
    Pieces(int64_t first, int64_t last, int64_t piece)
        : first(first),
          last(last),
          piece(piece),
          count(std::max<int64_t>(1, (last - first + piece - 1) / piece)) {}
    int64_t first = 0, last = 0, piece = 1, count = 1;
  };

  struct Slot {
    // Written by the caller: the call's number << kPostBits | a post's
    // state; the share before it, and how many pieces the caller's own
    // share has (a worker reads the caller's pieces' word only where there
    // is more than one; a copy of mine_.count in this line, which the
    // worker reads anyway, so that mine_'s stays the caller's); how long
    // the worker spins.
    alignas(64) std::atomic<uint64_t> post{0};
    std::optional<Fn> fn;  // a FunctionRef is copied, not assigned
    Pieces share;
    int64_t callers_pieces = 1;
    std::atomic<unsigned> spin_us{100};  // set with each post, read as the worker waits
    // Written by the worker: the last call whose share it ran << 1 |
    // kAsleep while it sleeps (or is about to). A worker not yet started
    // counts as asleep.
    alignas(64) std::atomic<uint64_t> state{kAsleep};
    // The pieces of the worker's share that nobody has started, [next,
    // end), once the worker has begun a share of more than one piece: the
    // call's tag | next << kPieceBits | end. The worker takes from next,
    // the caller, out of its own work, from end; both by compare-and-swap.
    // Beside `state`, which the caller reads as it waits, so a caller
    // that finds nothing to take has moved no other line.
    std::atomic<uint64_t> left{0};
    // Written by the worker: the last call whose hot share it started.
    // Read by the caller only when it revokes, so it stays in the
    // worker's cache.
    alignas(64) std::atomic<uint64_t> start{0};
    // A cold share's owner: its call's number << 1 | 1 when the caller
    // took it back, | 0 when the worker claimed it.
    alignas(64) std::atomic<uint64_t> claim{0};
  };

  // Slot::left: the low 40 bits of the call's number, then next and end.
  static constexpr int kPieceBits = 12;
  static constexpr uint64_t kPieceMask = (uint64_t{1} << kPieceBits) - 1;
  static uint64_t Tag(uint64_t call) { return call << (2 * kPieceBits); }
  static bool Tagged(uint64_t left, uint64_t call) {
    return (left ^ Tag(call)) >> (2 * kPieceBits) == 0;
  }
  static uint64_t Next(uint64_t left) { return left >> kPieceBits & kPieceMask; }
  static uint64_t End(uint64_t left) { return left & kPieceMask; }

  // Pieces [from, to) of `share`, run as one range.
  void TakePieceRange(Fn fn, const Pieces& share, uint64_t from, uint64_t to) {
    Take(fn, share.first + static_cast<int64_t>(from) * share.piece,
         std::min(share.last, share.first + static_cast<int64_t>(to) * share.piece));
  }

  // A share's pieces: kPiecesAShare of them where the share is at least
  // that many grains, each a whole number of grains.
  static int64_t PieceSize(int64_t share, int64_t grain) {
    const int64_t want = std::max(grain, (share + kPiecesAShare - 1) / kPiecesAShare);
    return (want + grain - 1) / grain * grain;
  }

  enum Taken { kTook, kNoneLeft, kNotStarted };

  // The back half (rounded up) of the pieces of `share` of `call` that
  // its runner has not started, taken from `left` and run here; how many
  // through `n` when kTook. `share` is read only once they are taken: a
  // caller's, in mine_, holds the next call's once this one is over.
  Taken TakePieces(std::atomic<uint64_t>& left, const Pieces& share, uint64_t call, Fn fn,
                   uint64_t& n) {
    uint64_t v = left.load(std::memory_order_acquire);
    for (;;) {
      if (!Tagged(v, call)) return kNotStarted;
      if (Next(v) >= End(v)) return kNoneLeft;
      const uint64_t half = (End(v) - Next(v) + 1) / 2;
      if (left.compare_exchange_weak(v, v - half, std::memory_order_acq_rel,
                                     std::memory_order_acquire)) {
        TakePieceRange(fn, share, End(v) - half, End(v));
        n = half;
        return kTook;
      }
    }
  }

  // Every piece of `share` of `call` not started, in `left`.
  static void Open(std::atomic<uint64_t>& left, const Pieces& share, uint64_t call) {
    left.store(Tag(call) | static_cast<uint64_t>(share.count), std::memory_order_release);
  }

  // `share`, piece by piece from the front of `left` (opened for it)
  // while others may take them from the back; one piece is run whole.
  // Returns how many pieces others took.
  int64_t RunPieces(std::atomic<uint64_t>& left, const Pieces& share, Fn fn) {
    if (share.count <= 1) {
      Take(fn, share.first, share.last);
      return 0;
    }
    uint64_t v = left.load(std::memory_order_relaxed);
    while (Next(v) < End(v)) {
      if (left.compare_exchange_weak(v, v + (uint64_t{1} << kPieceBits), std::memory_order_acq_rel,
                                     std::memory_order_relaxed)) {
        TakePieceRange(fn, share, Next(v), Next(v) + 1);
        v = left.load(std::memory_order_relaxed);
      }
    }
    return share.count - static_cast<int64_t>(End(v));
  }

  // On the caller: the pieces of a worker's share it has not started.
  Taken TakeWorkersPieces(Slot& s, uint64_t call, Fn fn) {
    uint64_t n = 0;
    const Taken t = TakePieces(s.left, s.share, call, fn, n);
    if (t == kTook) pieces_taken.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
    return t;
  }

  // On a worker whose share of `call` is done: the caller's pieces it has
  // not started, the back half at a time, until none is left; each run
  // counted in mine_done_, which the caller waits for.
  void TakeCallersPieces(uint64_t call, Fn fn) {
    uint64_t n = 0;
    while (TakePieces(mine_left_, mine_, call, fn, n) == kTook) {
      callers_pieces_taken.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
      mine_done_.fetch_add(static_cast<int64_t>(n), std::memory_order_release);
    }
  }

  // The cold share of `call` for the caller or the worker: false when the
  // other had it first, or when the call is over (a worker that saw an
  // old post wakes after the caller has taken back that share and newer
  // ones: the word only moves forward, so the worker's claim fails).
  static bool Claim(Slot& s, uint64_t call, bool by_caller) {
    uint64_t c = s.claim.load(std::memory_order_acquire);
    while (c >> 1 < call) {
      if (s.claim.compare_exchange_weak(c, call << 1 | (by_caller ? 1 : 0),
                                        std::memory_order_acq_rel, std::memory_order_acquire)) {
        return true;
      }
    }
    return false;
  }

  // The hot share of `call`, not yet done: the caller's when its worker
  // has not started it.
  static bool Revoke(Slot& s, uint64_t call) {
    s.post.store(call << kPostBits | kRevoking, std::memory_order_seq_cst);
    const bool started = s.start.load(std::memory_order_seq_cst) == call;
    s.post.store(call << kPostBits | (started ? kWorkerOwns : kCallerOwns),
                 std::memory_order_release);
    return !started;
  }

  // Whether the worker runs the hot share of `call` (its post read as
  // `post`): it says it starts, then reads the post again.
  static bool Start(Slot& s, uint64_t call, uint64_t post) {
    if ((post & kPostState) == kCallerOwns) return false;
    s.start.store(call, std::memory_order_seq_cst);
    for (;;) {
      post = s.post.load(std::memory_order_seq_cst);
      if (post >> kPostBits != call) return false;  // the caller took it and went on
      switch (post & kPostState) {
        case kHot:
        case kWorkerOwns:
          return true;
        case kCallerOwns:
          return false;
        default:  // kRevoking: the verdict is a store away
          CpuRelax();
      }
    }
  }

  // A share, with its exception kept for the caller. An empty share (a
  // range shorter than its parts) runs nothing, as at::parallel_for's.
  void Take(Fn fn, int64_t first, int64_t last) {
    if (first >= last) return;
    in_pool_share = true;
    try {
      fn(first, last);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (!error_) error_ = std::current_exception();
    }
    in_pool_share = false;
  }

  void Grow(int workers) {
    if (static_cast<int>(slots_.size()) >= workers) return;
    // The CPUs, for Run's spin: read when the pool grows, not on every
    // call (a system call).
    cpus_ = UsableCpus();
    while (static_cast<int>(slots_.size()) < workers) {
      slots_.push_back(std::make_unique<Slot>());
      cold_.push_back(false);
      taken_.push_back(false);
      std::thread(&Pool::Work, this, slots_.back().get()).detach();
    }
  }

  void Work(Slot* slot) {
    uint64_t seen = 0;  // the last call posted to this worker that it handled
    for (;;) {
      const uint64_t post = Wait(*slot, seen);
      seen = post >> kPostBits;
      while (hold_workers.load(std::memory_order_relaxed)) CpuRelax();
      if ((post & kPostState) == kCold ? !Claim(*slot, seen, /*by_caller=*/false)
                                       : !Start(*slot, seen, post)) {
        continue;  // the caller's
      }
      // Read before the share is said done: the caller may post the next
      // call's after that.
      const Fn fn = *slot->fn;
      const bool callers_pieces = slot->callers_pieces > 1;
      if (slot->share.count > 1) Open(slot->left, slot->share, seen);
      RunPieces(slot->left, slot->share, fn);
      slot->state.store(seen << 1, std::memory_order_release);
      if (callers_pieces) TakeCallersPieces(seen, fn);
    }
  }

  // Spins, then sleeps, until `slot` holds a post of a call after `seen`;
  // returns it, the worker's state awake.
  uint64_t Wait(Slot& slot, uint64_t seen) {
    auto awake = [&](uint64_t post) {
      if ((slot.state.load(std::memory_order_relaxed) & kAsleep) != 0) {
        slot.state.store(seen << 1, std::memory_order_relaxed);
      }
      return post;
    };
    uint64_t post = slot.post.load(std::memory_order_acquire);
    if (post >> kPostBits != seen) return awake(post);
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::microseconds(slot.spin_us.load(std::memory_order_relaxed));
    for (int i = 1;; ++i) {
      post = slot.post.load(std::memory_order_acquire);
      if (post >> kPostBits != seen) return awake(post);
      CpuRelax();
      if (i % 64 == 0 && std::chrono::steady_clock::now() > until &&
          !awake_workers.load(std::memory_order_relaxed)) {
        break;
      }
    }
    // Asleep from here on; a post made before the caller could see it
    // (read after the state is written, both seq_cst) is run now.
    slot.state.store(seen << 1 | kAsleep, std::memory_order_seq_cst);
    post = slot.post.load(std::memory_order_seq_cst);
    if (post >> kPostBits != seen) return awake(post);
    std::unique_lock<std::mutex> lock(sleep_mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    wake_.wait(lock, [&] {
      post = slot.post.load(std::memory_order_seq_cst);
      return post >> kPostBits != seen;
    });
    sleepers_.fetch_sub(1, std::memory_order_relaxed);
    return awake(post);
  }

  std::mutex call_mu_;
  // Under call_mu_:
  uint64_t calls_ = 0;
  unsigned cpus_ = 1;                         // UsableCpus() when the pool last grew
  std::vector<std::unique_ptr<Slot>> slots_;  // one a worker
  std::vector<bool> cold_, taken_;            // this call's share w + 1: posted cold, taken back
  Pieces mine_;  // the caller's share of this call: read by a worker once it has taken pieces of it
  // The caller's pieces no one has started, as Slot::left: the caller
  // runs them from the front, workers done with their own share take them
  // from the back; and how many pieces workers took and ran.
  alignas(64) std::atomic<uint64_t> mine_left_{0};
  std::atomic<int64_t> mine_done_{0};
  std::exception_ptr error_;  // read by the caller, set under error_mu_
  std::mutex error_mu_;
  alignas(64) std::atomic<int> sleepers_{0};
  std::mutex sleep_mu_;
  std::condition_variable wake_;
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

void SetSpinPoolWorkersForTest(bool stay_awake, bool hold) {
  awake_workers.store(stay_awake, std::memory_order_relaxed);
  hold_workers.store(hold, std::memory_order_relaxed);
}

int64_t SpinPoolSharesRevoked() { return revoked.load(std::memory_order_relaxed); }

int64_t SpinPoolPiecesTaken() { return pieces_taken.load(std::memory_order_relaxed); }

int64_t SpinPoolCallersPiecesTaken() {
  return callers_pieces_taken.load(std::memory_order_relaxed);
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
  Pool::Get().Run(static_cast<int>(parts), begin, end, (range - 1) / parts + 1, grain, fn);
}

void ParallelForRowsOf(absl::Span<const int64_t> rows, int64_t grain,
                       absl::FunctionRef<void(size_t, int64_t, int64_t)> fn) {
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  ParallelFor(0, total, grain, [&](int64_t first, int64_t last) {
    int64_t begin = 0;  // matrix m's first row in the whole
    for (size_t m = 0; m < rows.size() && begin < last; begin += rows[m++]) {
      const int64_t lo = std::max(first, begin), hi = std::min(last, begin + rows[m]);
      if (lo < hi) fn(m, lo - begin, hi - begin);
    }
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
