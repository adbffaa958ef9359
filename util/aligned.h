// Vectors whose data starts on a cache line, for kernels' scratch buffers.
//
// std::vector's data is only as aligned as malloc makes it (16 bytes), so
// where a kernel's 32- and 64-byte loads and stores fall against cache
// lines depends on how the heap happens to lie. In bench/window_pricing's
// mixed model (F W W F) on a Zen 5, one thread, the window layers'
// attention took 20.3 ms a 2048-token prefill instead of 14.9 when the same
// program was given a longer --arch path (which moves the heap's later
// allocations), and the full layers' did not change; with its scratch on
// cache lines, 14.7-15.8 ms for both paths.
#ifndef HILNAS_UTIL_ALIGNED_H_
#define HILNAS_UTIL_ALIGNED_H_

#include <cstddef>
#include <new>
#include <vector>

namespace hilnas {

inline constexpr std::size_t kCacheLine = 64;

template <typename T, std::size_t kAlign = kCacheLine>
struct AlignedAllocator {
  static_assert(kAlign >= alignof(T) && (kAlign & (kAlign - 1)) == 0,
                "alignment must be a power of two at least T's own");
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = AlignedAllocator<U, kAlign>;
  };
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U, kAlign>&) {}  // NOLINT: rebinding converts implicitly

  T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(kAlign)));
  }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t(kAlign)); }

  template <typename U>
  bool operator==(const AlignedAllocator<U, kAlign>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const AlignedAllocator<U, kAlign>&) const {
    return false;
  }
};

// A std::vector whose data() is a multiple of kCacheLine.
template <typename T>
using AlignedVector = std::vector<T, AlignedAllocator<T>>;

}  // namespace hilnas

#endif  // HILNAS_UTIL_ALIGNED_H_
