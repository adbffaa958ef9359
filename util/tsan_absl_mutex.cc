// Built into test binaries of TSan builds only (HILNAS_SANITIZE=thread).
//
// Debian's Abseil is compiled without -fsanitize=thread, so ThreadSanitizer
// cannot see absl::Mutex acquire or release memory, and reports every
// access guarded by one as a race (a two-thread counter under MutexLock is
// enough). These definitions interpose the Mutex entry points hilnas uses:
// each calls Abseil's own implementation (found with dlsym(RTLD_NEXT)) and
// tells TSan about the happens-before edge with __tsan_acquire/release. The
// locking itself is Abseil's, unchanged.
//
// Abseil evaluates an Await's condition on whichever thread happens to be in
// the Mutex: an unlocking thread evaluates its waiters' conditions, reading
// what they capture (a waiter's stack variables among them) after its
// release above. Condition::Eval, called through the library's PLT, is
// interposed too: inside an operation on a Mutex it acquires that Mutex
// before the condition runs and releases it after, as Abseil's own
// annotations do in a TSan build of Abseil (EvalConditionAnnotated). Without
// it, PpdGenerateTest read as a race between the main thread's evaluation of
// a worker's condition and the worker's next write of its round counter.
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"

namespace {

template <typename F>
F Real(const char* mangled) {
  void* f = dlsym(RTLD_NEXT, mangled);
  if (f == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found in libabsl_synchronization\n", mangled);
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

// The Mutex whose Lock, Unlock or Await this thread is inside, for
// Condition::Eval.
thread_local const void* t_inside = nullptr;

class Inside {
 public:
  explicit Inside(const void* mu) : outer_(t_inside) { t_inside = mu; }
  ~Inside() { t_inside = outer_; }

 private:
  const void* outer_;
};

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN4absl7debian35Mutex4LockEv");
  {
    Inside inside(this);
    real(this);
  }
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN4absl7debian35Mutex6UnlockEv");
  __tsan_release(this);
  Inside inside(this);
  real(this);
}

void Mutex::Await(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>("_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  {
    Inside inside(this);
    real(this, cond);
  }
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  bool met;
  {
    Inside inside(this);
    met = real(this, cond, timeout);
  }
  __tsan_acquire(this);
  return met;
}

bool Condition::Eval() const {
  static auto real = Real<bool (*)(const Condition*)>("_ZNK4absl7debian39Condition4EvalEv");
  const void* mu = t_inside;
  if (mu != nullptr) __tsan_acquire(const_cast<void*>(mu));
  const bool met = real(this);
  if (mu != nullptr) __tsan_release(const_cast<void*>(mu));
  return met;
}

ABSL_NAMESPACE_END
}  // namespace absl
