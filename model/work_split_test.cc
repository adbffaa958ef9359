#include "model/work_split.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace hilnas {
namespace {

// Each test sets ATen's thread count; the binary's other tests get theirs
// back. ParallelFor runs on the spin pool here (on OpenMP it is
// at::parallel_for), and the binary's other tests get OpenMP back.
class WorkSplitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SetThreadPool(ThreadPool::kSpin);
    ASSERT_EQ(CurrentThreadPool(), ThreadPool::kSpin);
  }
  void TearDown() override {
    at::set_num_threads(threads_);
    SetThreadPool(ThreadPool::kOpenMp);
  }
  int threads_ = at::get_num_threads();
};

// Every index once, in chunks of the size asked, the last one short.
TEST_F(WorkSplitTest, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    for (int64_t n : {0, 1, 7, 64, 1000}) {
      for (int64_t chunk : {0, 1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
        std::atomic<int> calls{0};
        ParallelChunks(n, chunk, [&](int64_t a, int64_t b) {
          ASSERT_LT(a, b);
          ASSERT_LE(b, n);
          calls.fetch_add(1);
          for (int64_t i = a; i < b; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << "n " << n << " chunk " << chunk;
        }
        const int64_t c = std::max<int64_t>(chunk, 1);
        const int64_t chunks = n == 0 ? 0 : (n - 1) / c + 1;
        // One thread (or one chunk) runs [0, n) in one call.
        EXPECT_EQ(calls.load(), threads == 1 || chunks <= 1 ? (n > 0 ? 1 : 0) : chunks);
      }
    }
  }
}

// The mechanism: a thread held up in its first chunk does not hold the
// others' work. Chunk 0 waits (up to 5 s) until the other 15 are done; by
// demand the other thread does them all and the wait ends at once, where
// equal contiguous shares (at::parallel_for's, HILNAS_WORK_SPLIT=static)
// leave half of them behind chunk 0 and the wait times out. No timing is
// asserted: a loaded machine only makes the wait longer.
TEST_F(WorkSplitTest, AFreeThreadTakesTheNextChunk) {
  at::set_num_threads(2);
  if (at::get_num_threads() < 2) GTEST_SKIP() << "one thread only";
  std::mutex mu;
  std::condition_variable others_done;
  int done = 0;
  std::vector<std::thread::id> owner(16);
  ParallelChunks(16, 1, [&](int64_t a, int64_t) {
    std::unique_lock<std::mutex> lock(mu);
    owner[static_cast<size_t>(a)] = std::this_thread::get_id();
    if (a == 0) {
      others_done.wait_for(lock, std::chrono::seconds(5), [&] { return done == 15; });
    } else if (++done == 15) {
      others_done.notify_all();
    }
  });
  int by_other = 0;
  for (int64_t i = 1; i < 16; ++i) by_other += owner[static_cast<size_t>(i)] != owner[0];
  EXPECT_EQ(by_other, 15);
}

// From inside a parallel region: in order, on the calling thread.
TEST_F(WorkSplitTest, NestedCallRunsInline) {
  at::set_num_threads(2);
  std::atomic<int> calls{0};
  at::parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    ParallelChunks(10, 1, [&](int64_t a, int64_t b) {
      EXPECT_EQ(a, 0);
      EXPECT_EQ(b, 10);
      calls.fetch_add(1);
    });
  });
  EXPECT_GE(calls.load(), 1);
}

// ParallelFor's shares are at::parallel_for's, for every range, grain and
// thread count: the ranges fn sees cover [begin, end) once, each inside
// one of at::parallel_for's shares; a share comes in at most 8 pieces,
// each a whole number of grains but the share's last.
TEST_F(WorkSplitTest, ParallelForSharesAreAtensShares) {
  for (int threads : {1, 2, 3, 4}) {
    at::set_num_threads(threads);
    for (int64_t begin : {0, 5}) {
      for (int64_t n : {0, 1, 2, 7, 64, 1000}) {
        for (int64_t grain : {0, 1, 3, 64, 5000}) {
          std::mutex mu;
          std::set<std::pair<int64_t, int64_t>> ours, atens;
          ParallelFor(begin, begin + n, grain, [&](int64_t a, int64_t b) {
            std::lock_guard<std::mutex> lock(mu);
            ours.emplace(a, b);
          });
          at::parallel_for(begin, begin + n, grain, [&](int64_t a, int64_t b) {
            std::lock_guard<std::mutex> lock(mu);
            atens.emplace(a, b);
          });
          const std::string where = "threads " + std::to_string(threads) + ", [" +
                                    std::to_string(begin) + ", " + std::to_string(begin + n) +
                                    "), grain " + std::to_string(grain);
          int64_t at = begin;
          for (const auto& [a, b] : ours) {  // in order: they tile the range
            EXPECT_EQ(a, at) << where;
            EXPECT_LT(a, b) << where;
            at = b;
          }
          EXPECT_EQ(at, begin + n) << where;
          for (const auto& [first, last] : atens) {
            std::vector<std::pair<int64_t, int64_t>> in;
            for (const auto& r : ours) {
              if (r.first >= first && r.first < last) in.push_back(r);
            }
            ASSERT_FALSE(in.empty()) << where;
            EXPECT_EQ(in.back().second, last) << where << ": a piece crosses a share's end";
            EXPECT_LE(in.size(), 8u) << where;
            for (size_t i = 0; i + 1 < in.size(); ++i) {
              EXPECT_EQ((in[i].second - in[i].first) % std::max<int64_t>(grain, 1), 0) << where;
            }
          }
        }
      }
    }
  }
}

// The mechanism: the second share runs on another thread while the first
// holds the caller. Share 0 (the caller's) waits up to 5 s for share 1; a
// pool that left share 1 to the caller would time out. Asleep or spinning,
// the worker is woken by the call.
TEST_F(WorkSplitTest, ParallelForRunsASecondShareOnAWorker) {
  at::set_num_threads(2);
  if (at::get_num_threads() < 2) GTEST_SKIP() << "one thread only";
  for (int pause_ms : {0, 20}) {  // 20 ms: the workers have gone to sleep
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    std::mutex mu;
    std::condition_variable second_done;
    bool done = false;
    std::thread::id first, second;
    ParallelFor(0, 2, 1, [&](int64_t a, int64_t) {
      std::unique_lock<std::mutex> lock(mu);
      if (a == 0) {
        first = std::this_thread::get_id();
        second_done.wait_for(lock, std::chrono::seconds(5), [&] { return done; });
      } else {
        second = std::this_thread::get_id();
        done = true;
        second_done.notify_all();
      }
    });
    EXPECT_EQ(first, std::this_thread::get_id());
    EXPECT_NE(second, first) << "after " << pause_ms << " ms idle";
  }
}

// Share 1 of a call on a worker (share 0 spins up to 5 s for it, so a
// sleeping worker has time to wake); the thread it ran on.
std::thread::id SecondShareOnAWorker() {
  std::atomic<bool> done{false};
  std::thread::id second;
  ParallelFor(0, 2, 1, [&](int64_t a, int64_t) {
    if (a == 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      while (!done.load() && std::chrono::steady_clock::now() < until) CpuRelax();
    } else {
      second = std::this_thread::get_id();
      done.store(true);
    }
  });
  return second;
}

// A worker that cannot start (taken off its CPU while it spun, asleep)
// leaves its share to the caller: held workers here, kept awake after a
// share ran on one (a hot post, revoked), and asleep after 20 ms (a cold
// post, taken back, or, on a host too busy to let the worker reach its
// sleep, a hot one revoked). Without that the call would wait for the
// hold's end (2 s later, or when the call returns) and share 1 would run
// on the worker. Released, the workers run shares again.
TEST_F(WorkSplitTest, ParallelForRunsTheSharesOfWorkersThatCannotStart) {
  at::set_num_threads(2);
  if (at::get_num_threads() < 2) GTEST_SKIP() << "one thread only";
  // A call while every worker is held, after a share ran on a worker kept
  // awake or left to sleep: true when both shares ran on the caller, once
  // each.
  auto call_held = [&](bool stay_awake) {
    std::mutex mu;
    std::condition_variable returned_cv;
    bool returned = false;
    std::thread release([&] {
      std::unique_lock<std::mutex> lock(mu);
      returned_cv.wait_for(lock, std::chrono::seconds(2), [&] { return returned; });
      SetSpinPoolWorkersForTest(false, false);
    });
    SetSpinPoolWorkersForTest(stay_awake, false);
    if (SecondShareOnAWorker() == std::this_thread::get_id()) return false;
    if (!stay_awake) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    SetSpinPoolWorkersForTest(stay_awake, true);
    std::vector<std::thread::id> ran(2);
    std::atomic<int> runs{0};
    ParallelFor(0, 2, 1, [&](int64_t a, int64_t) {
      ran[static_cast<size_t>(a)] = std::this_thread::get_id();
      runs.fetch_add(1);
    });
    {
      std::lock_guard<std::mutex> lock(mu);
      returned = true;
      returned_cv.notify_all();
    }
    release.join();
    return runs.load() == 2 && ran[0] == std::this_thread::get_id() &&
           ran[1] == std::this_thread::get_id();
  };
  const int64_t revoked = SpinPoolSharesRevoked();
  EXPECT_TRUE(call_held(/*stay_awake=*/true));
  EXPECT_EQ(SpinPoolSharesRevoked(), revoked + 1);  // the hot post's
  EXPECT_TRUE(call_held(/*stay_awake=*/false));
  // The worker, released, skips the share it lost and takes the next.
  EXPECT_NE(SecondShareOnAWorker(), std::this_thread::get_id());
}

// A call over [0, kPiecesN) in grains of kPiecesGrain (shares of 800: 8
// pieces of 100) for the two tests below, each of which holds one thread's
// first piece until every other index has run.
constexpr int64_t kPiecesN = 1600, kPiecesGrain = 100;
struct PiecesCall {
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<std::thread::id> ran = std::vector<std::thread::id>(kPiecesN);
  std::atomic<int64_t> done{0};
  std::atomic<bool> timed_out{false};

  // Spins until ready(), 5 s at most.
  template <typename Ready>
  void WaitUntil(Ready ready) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!ready()) {
      if (std::chrono::steady_clock::now() > until) {
        timed_out.store(true);
        return;
      }
      CpuRelax();
    }
  }
  // The held piece [a, b): ends when everything else has run.
  void Hold(int64_t a, int64_t b) {
    WaitUntil([&] { return done.load() >= kPiecesN - (b - a); });
  }
  void Ran(int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) ran[static_cast<size_t>(i)] = std::this_thread::get_id();
    done.fetch_add(b - a);
  }
  // Indices run on the caller; the first whose thread is not the one
  // `on_caller(i)` expects (-1: none).
  template <typename OnCaller>
  std::pair<int64_t, int64_t> OnTheCaller(OnCaller on_caller) const {
    int64_t n = 0, first_wrong = -1;
    for (int64_t i = 0; i < kPiecesN; ++i) {
      const bool here = ran[static_cast<size_t>(i)] == caller;
      n += here ? 1 : 0;
      if (here != on_caller(i) && first_wrong < 0) first_wrong = i;
    }
    return {n, first_wrong};
  }
};

// Runs attempt() with the worker kept awake and spinning, up to 200
// times, until it returns true (a call whose worker did not start in time,
// its share revoked or taken back, tests nothing and returns false). Beside
// other busy processes the kernel took the worker off its CPU in 11 calls
// in a row, each straight after the worker had run a share: a failed call
// sleeps 1 ms, so the next falls elsewhere in the scheduler's slices.
template <typename Attempt>
void OnAnAwakeWorker(Attempt attempt) {
  SetSpinPoolWorkersForTest(/*stay_awake=*/true, /*hold=*/false);
  bool tested = false;
  for (int i = 0; i < 200 && !tested; ++i) {
    SecondShareOnAWorker();  // the worker awake and spinning
    tested = attempt();
    if (!tested) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  SetSpinPoolWorkersForTest(false, false);
  EXPECT_TRUE(tested) << "no worker started a share in 200 calls";
}

// A worker slower than the caller (a phone's little core) keeps only the
// pieces it has started: here its first piece holds it until every other
// index has run, which the caller does, taking the pieces the worker has
// not started, half of those left at a time. Without that the worker's
// piece would wait 5 s and then the worker would run its share's rest.
TEST_F(WorkSplitTest, ParallelForCallerTakesThePiecesASlowWorkerHasNotStarted) {
  at::set_num_threads(2);
  if (at::get_num_threads() < 2) GTEST_SKIP() << "one thread only";
  OnAnAwakeWorker([] {
    const int64_t taken = SpinPoolPiecesTaken();
    PiecesCall call;
    std::mutex mu;
    int64_t worker_first = -1;  // the first index a worker ran
    ParallelFor(0, kPiecesN, kPiecesGrain, [&](int64_t a, int64_t b) {
      bool hold = false;
      if (std::this_thread::get_id() != call.caller) {
        std::lock_guard<std::mutex> lock(mu);
        if (worker_first < 0) worker_first = a;
        hold = worker_first == a;
      }
      if (hold) call.Hold(a, b);  // the slow worker's piece
      call.Ran(a, b);
    });
    EXPECT_EQ(call.done.load(), kPiecesN);
    if (worker_first < 0) return false;  // the worker never started
    EXPECT_FALSE(call.timed_out.load()) << "the caller left the worker's pieces to it";
    EXPECT_EQ(worker_first, kPiecesN / 2) << "a worker runs its share from the front";
    const auto [on_the_caller, first_wrong] = call.OnTheCaller(
        [&](int64_t i) { return i < worker_first || i >= worker_first + kPiecesGrain; });
    EXPECT_EQ(on_the_caller, kPiecesN - kPiecesGrain)
        << "index " << first_wrong << " ran on the wrong thread";
    EXPECT_EQ(SpinPoolPiecesTaken(), taken + 7);  // the share's pieces but the first
    return true;
  });
}

// The other way round: a caller slower than its workers (the thread that
// runs the model on a phone's little core) keeps only the pieces of its
// share it has started. Its first piece holds it here until every other
// index has run, which the worker does once its own share is done, taking
// the caller's pieces not started, half of those left at a time. Without
// that the caller's piece would wait 5 s and then the caller would run the
// rest of its share. The worker's pieces wait for the caller to start its
// own (else the worker, done first, would take them all before the caller
// began).
TEST_F(WorkSplitTest, ParallelForWorkersTakeThePiecesASlowCallerHasNotStarted) {
  at::set_num_threads(2);
  if (at::get_num_threads() < 2) GTEST_SKIP() << "one thread only";
  OnAnAwakeWorker([] {
    const int64_t taken = SpinPoolCallersPiecesTaken();
    PiecesCall call;
    std::atomic<int64_t> caller_first{-1};  // the first index the caller ran
    ParallelFor(0, kPiecesN, kPiecesGrain, [&](int64_t a, int64_t b) {
      if (std::this_thread::get_id() != call.caller) {
        call.WaitUntil([&] { return caller_first.load() >= 0; });
      } else if (int64_t none = -1; caller_first.compare_exchange_strong(none, a)) {
        call.Hold(a, b);  // the slow caller's piece
      }
      call.Ran(a, b);
    });
    EXPECT_EQ(call.done.load(), kPiecesN);
    const auto [on_the_caller, first_wrong] =
        call.OnTheCaller([](int64_t i) { return i < kPiecesGrain; });
    if (on_the_caller == kPiecesN) return false;  // the worker never started
    EXPECT_FALSE(call.timed_out.load()) << "the workers left the caller's pieces to it";
    EXPECT_EQ(caller_first.load(), 0) << "the caller runs its share from the front";
    EXPECT_EQ(on_the_caller, kPiecesGrain) << "index " << first_wrong << " ran on the wrong thread";
    EXPECT_EQ(SpinPoolCallersPiecesTaken(), taken + 7);  // the share's pieces but the first
    return true;
  });
}

// Many calls in a row, some after the workers have gone to sleep, some
// about when they go (a worker's spin lasts 0.1 ms: a post then may find
// it asleep, going to sleep, or waking from an older call's post, and a
// share posted cold may be claimed or taken back): every index once in
// each, none lost, none run twice.
TEST_F(WorkSplitTest, ParallelForCallsInARowLoseNothing) {
  for (int threads : {2, 3}) {
    at::set_num_threads(threads);
    std::vector<std::atomic<int>> seen(97);
    for (int call = 0; call < 3000; ++call) {
      if (call % 500 == 499) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      if (call % 7 == 3) std::this_thread::sleep_for(std::chrono::microseconds(60 + call % 80));
      ParallelFor(0, 97, 1, [&](int64_t a, int64_t b) {
        for (int64_t i = a; i < b; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
      });
    }
    for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i].load(), 3000) << "index " << i;
  }
}

// ParallelForRowsOf splits the matrices' rows end to end as ParallelFor
// splits their sum: every row of every matrix once, each piece inside one
// matrix and inside one of at::parallel_for's shares of the sum (so q, k
// and v on two threads are two shares, not six), on either pool.
TEST_F(WorkSplitTest, ParallelForRowsOfSplitsTheMatricesEndToEnd) {
  const std::vector<std::vector<int64_t>> cases = {
      {}, {0}, {5}, {3, 0, 7}, {512, 128, 128}, {1536, 1536}, {1, 1, 1, 1, 1, 1, 1, 1}};
  for (ThreadPool pool : {ThreadPool::kSpin, ThreadPool::kOpenMp}) {
    SetThreadPool(pool);
    for (int threads : {1, 2, 3, 4}) {
      at::set_num_threads(threads);
      for (const std::vector<int64_t>& rows : cases) {
        for (int64_t grain : {1, 16, 1000}) {
          const std::string where = std::string(ThreadPoolName(pool)) + ", threads " +
                                    std::to_string(threads) + ", " + std::to_string(rows.size()) +
                                    " matrices, grain " + std::to_string(grain);
          std::vector<int64_t> start(rows.size() + 1, 0);  // matrix m's first row in the sum
          for (size_t m = 0; m < rows.size(); ++m) start[m + 1] = start[m] + rows[m];
          std::mutex mu;
          std::vector<std::vector<int>> seen(rows.size());
          for (size_t m = 0; m < rows.size(); ++m) seen[m].assign(rows[m], 0);
          std::vector<std::pair<int64_t, int64_t>> pieces;  // in the sum's rows
          ParallelForRowsOf(rows, grain, [&](size_t m, int64_t first, int64_t last) {
            std::lock_guard<std::mutex> lock(mu);
            ASSERT_LT(m, rows.size()) << where;
            ASSERT_LE(0, first) << where;
            ASSERT_LT(first, last) << where;
            ASSERT_LE(last, rows[m]) << where;
            for (int64_t r = first; r < last; ++r) ++seen[m][r];
            pieces.emplace_back(start[m] + first, start[m] + last);
          });
          for (size_t m = 0; m < rows.size(); ++m) {
            for (int64_t r = 0; r < rows[m]; ++r) {
              ASSERT_EQ(seen[m][r], 1) << where << ": matrix " << m << " row " << r;
            }
          }
          std::vector<std::pair<int64_t, int64_t>> shares;
          at::parallel_for(0, start.back(), grain, [&](int64_t a, int64_t b) {
            std::lock_guard<std::mutex> lock(mu);
            shares.emplace_back(a, b);
          });
          for (const auto& [a, b] : pieces) {
            const bool inside = std::any_of(shares.begin(), shares.end(), [&](const auto& sh) {
              return sh.first <= a && b <= sh.second;
            });
            EXPECT_TRUE(inside) << where << ": rows [" << a << ", " << b
                                << ") of the sum cross a share's end";
          }
        }
      }
    }
  }
  SetThreadPool(ThreadPool::kSpin);
}

// A share's exception reaches the caller once every share has ended.
TEST_F(WorkSplitTest, ParallelForRethrowsAShareException) {
  at::set_num_threads(2);
  std::atomic<int> ran{0};
  EXPECT_THROW(ParallelFor(0, 4, 1,
                           [&](int64_t a, int64_t) {
                             ran.fetch_add(1);
                             if (a == 2) throw std::runtime_error("share 2");
                           }),
               std::runtime_error);
  if (at::get_num_threads() >= 2) {
    // Share [0, 2) in two pieces; [2, 4) whole (taken back from a worker
    // asleep) or in two pieces, the second run after the first threw.
    EXPECT_GE(ran.load(), 3);
    EXPECT_LE(ran.load(), 4);
  } else {
    EXPECT_EQ(ran.load(), 1);
  }
  // The pool still works after it.
  std::atomic<int> after{0};
  ParallelFor(0, 4, 1, [&](int64_t a, int64_t b) { after.fetch_add(static_cast<int>(b - a)); });
  EXPECT_EQ(after.load(), 4);
}

// Inside a share, a nested call runs inline, and InParallelRegion says so.
TEST_F(WorkSplitTest, ParallelForNestedCallRunsInline) {
  at::set_num_threads(2);
  EXPECT_FALSE(InParallelRegion());
  std::atomic<int> inner{0}, flagged{0};
  ParallelFor(0, 2, 1, [&](int64_t, int64_t) {
    flagged.fetch_add(InParallelRegion() ? 1 : 0);
    ParallelFor(0, 10, 1, [&](int64_t a, int64_t b) {
      EXPECT_EQ(a, 0);
      EXPECT_EQ(b, 10);
      inner.fetch_add(1);
    });
  });
  EXPECT_EQ(inner.load(), at::get_num_threads() >= 2 ? 2 : 1);
  EXPECT_EQ(flagged.load(), inner.load());
  EXPECT_FALSE(InParallelRegion());
}

// The tuner's rule: the spin pool only when it beats OpenMP by more than
// the margin; ties, noise and missing times keep OpenMP.
TEST(ThreadPoolTuningTest, SpinOnlyWhenClearlyFaster) {
  EXPECT_EQ(ChooseThreadPool(1.0, 0.9), ThreadPool::kSpin);
  EXPECT_EQ(ChooseThreadPool(1.0, 1.0 - kThreadPoolMargin / 2), ThreadPool::kOpenMp);
  EXPECT_EQ(ChooseThreadPool(1.0, 1.0), ThreadPool::kOpenMp);
  EXPECT_EQ(ChooseThreadPool(0.9, 1.0), ThreadPool::kOpenMp);
  EXPECT_EQ(ChooseThreadPool(0, 0), ThreadPool::kOpenMp);
}

TEST(ThreadPoolTuningTest, TheVariableNamesAPoolOrIsRefused) {
  ::unsetenv("HILNAS_THREAD_POOL");
  auto unset = ThreadPoolFromEnvironment();
  ::setenv("HILNAS_THREAD_POOL", "spin", 1);
  auto spin = ThreadPoolFromEnvironment();
  ::setenv("HILNAS_THREAD_POOL", "tbb", 1);
  auto bad = ThreadPoolFromEnvironment();
  ::unsetenv("HILNAS_THREAD_POOL");
  ASSERT_TRUE(unset.ok());
  EXPECT_FALSE(unset->has_value());
  ASSERT_TRUE(spin.ok());
  EXPECT_EQ(spin->value(), ThreadPool::kSpin);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("HILNAS_THREAD_POOL=tbb"), std::string::npos);
}

// A step that takes `openmp_us` on OpenMP and `spin_us` on the spin pool,
// as a busy wait on the calling thread. The tuner must keep the pool whose
// step is faster, and leave it set. The step does not split: a split's cost
// is the host's (with both vCPUs of a Zen 4 held by other processes, a
// 2 ms step that split on OpenMP took 8 ms, waiting for its worker), and
// this checks the tuner's mechanism, not the pools; DecoderTest's tuning
// runs real splits on both.
ThreadPoolTuning TuneOnStep(double openmp_us, double spin_us) {
  return TuneThreadPool([&] {
    const double us = CurrentThreadPool() == ThreadPool::kSpin ? spin_us : openmp_us;
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::nanoseconds(static_cast<int64_t>(us * 1e3));
    while (std::chrono::steady_clock::now() < until) CpuRelax();
  });
}

TEST_F(WorkSplitTest, TheTunerKeepsThePoolWhoseStepIsFaster) {
  at::set_num_threads(2);
  const ThreadPoolTuning spin = TuneOnStep(400, 200);
  EXPECT_EQ(spin.chosen, ThreadPool::kSpin) << spin.Describe();
  EXPECT_EQ(CurrentThreadPool(), ThreadPool::kSpin);
  EXPECT_TRUE(spin.fixed.empty());
  EXPECT_EQ(spin.threads, 2);
  EXPECT_GE(spin.rounds, 5);
  EXPECT_LE(spin.rounds, 12);
  EXPECT_GT(spin.openmp_ms, spin.spin_ms);
  EXPECT_NE(spin.Describe().find("spin (a decode step"), std::string::npos) << spin.Describe();

  const ThreadPoolTuning openmp = TuneOnStep(200, 400);
  EXPECT_EQ(openmp.chosen, ThreadPool::kOpenMp) << openmp.Describe();
  EXPECT_EQ(CurrentThreadPool(), ThreadPool::kOpenMp);
}

TEST_F(WorkSplitTest, TheTunerTimesNothingForOneThreadOrANamedPool) {
  int steps = 0;
  at::set_num_threads(1);
  SetThreadPool(ThreadPool::kSpin);
  const ThreadPoolTuning one = TuneThreadPool([&] { ++steps; });
  EXPECT_EQ(one.chosen, ThreadPool::kOpenMp);
  EXPECT_EQ(CurrentThreadPool(), ThreadPool::kOpenMp);
  EXPECT_EQ(one.Describe(), "openmp (one thread: nothing splits)");

  at::set_num_threads(2);
  ::setenv("HILNAS_THREAD_POOL", "spin", 1);
  const ThreadPoolTuning named = TuneThreadPool([&] { ++steps; });
  ::unsetenv("HILNAS_THREAD_POOL");
  EXPECT_EQ(named.chosen, ThreadPool::kSpin);
  EXPECT_EQ(CurrentThreadPool(), ThreadPool::kSpin);
  EXPECT_EQ(named.Describe(), "spin (HILNAS_THREAD_POOL=spin)");
  EXPECT_EQ(steps, 0);
}

TEST(ChunkForTest, SizesChunks) {
  // About four chunks a thread, multiples of 16, at least 256.
  EXPECT_EQ(ChunkFor(2048, 2, 4, 1, 256, 2048), 256);
  EXPECT_EQ(ChunkFor(1536, 2, 4, 16, 256, 1536), 256);
  EXPECT_EQ(ChunkFor(4096, 2, 4, 1, 256, 4096), 512);
  // lo gives way rather than leave a thread idle: 128 outputs, 2 threads.
  EXPECT_EQ(ChunkFor(128, 2, 4, 16, 256, 128), 64);
  EXPECT_EQ(ChunkFor(300, 4, 4, 16, 256, 300), 80);
  // Capped by hi, rounded to align.
  EXPECT_EQ(ChunkFor(1536, 2, 2, 16, 16, 128), 128);
  EXPECT_EQ(ChunkFor(128, 2, 2, 16, 16, 128), 32);
  // Never more than n, never below 1.
  EXPECT_EQ(ChunkFor(5, 1, 1, 16, 256, 1000), 5);
  EXPECT_EQ(ChunkFor(0, 2, 4, 16, 256, 1000), 1);
}

}  // namespace
}  // namespace hilnas
