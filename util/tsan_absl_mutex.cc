// Built into test binaries of TSan builds only (HILNAS_SANITIZE=thread).
//
// Debian's Abseil is compiled without -fsanitize=thread, so ThreadSanitizer
// cannot see absl::Mutex acquire or release memory, and reports every
// access guarded by one as a race (a two-thread counter under MutexLock is
// enough). These definitions interpose the Mutex entry points hilnas uses:
// each calls Abseil's own implementation (found with dlsym(RTLD_NEXT)) and
// tells TSan about the happens-before edge with __tsan_acquire/release. The
// locking itself is Abseil's, unchanged.
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

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN4absl7debian35Mutex4LockEv");
  real(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>("_ZN4absl7debian35Mutex6UnlockEv");
  __tsan_release(this);
  real(this);
}

void Mutex::Await(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>("_ZN4absl7debian35Mutex5AwaitERKNS0_9ConditionE");
  __tsan_release(this);
  real(this, cond);
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "_ZN4absl7debian35Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  __tsan_release(this);
  const bool met = real(this, cond, timeout);
  __tsan_acquire(this);
  return met;
}

ABSL_NAMESPACE_END
}  // namespace absl
