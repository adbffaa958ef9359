// 64-bit FNV-1a, for fingerprints of checkpoints and token streams (not
// cryptographic: it detects mix-ups, not tampering).
#ifndef HILNAS_UTIL_FNV_H_
#define HILNAS_UTIL_FNV_H_

#include <cstddef>
#include <cstdint>

namespace hilnas {

inline constexpr uint64_t kFnv1aSeed = 14695981039346656037ull;

// Continues the hash `seed` over `size` bytes.
inline uint64_t Fnv1a(const void* data, size_t size, uint64_t seed = kFnv1aSeed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = seed;
  for (size_t i = 0; i < size; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace hilnas

#endif  // HILNAS_UTIL_FNV_H_
