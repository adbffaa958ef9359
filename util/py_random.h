// Python's `random.Random(seed)`: the Mersenne Twister seeded exactly as
// CPython seeds it from an integer (init_by_array over the integer's 32-bit
// words), with `getrandbits`, `_randbelow` and `sample` drawing as CPython
// 3.x draws. lm-evaluation-harness picks few-shot examples with
// `random.Random(1234).sample(docs, k)`; drawing the same numbers makes
// hilnas's few-shot prompts the harness's, document for document.
#ifndef HILNAS_UTIL_PY_RANDOM_H_
#define HILNAS_UTIL_PY_RANDOM_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hilnas {

class PyRandom {
 public:
  explicit PyRandom(uint64_t seed);

  uint32_t Next32();                 // genrand_uint32
  uint32_t GetRandBits(int k);       // getrandbits(k), 1 <= k <= 32
  uint64_t RandBelow(uint64_t n);    // _randbelow_with_getrandbits(n), n < 2^32
  double Random();                   // random(): 53-bit float in [0, 1)
  // Indices of random.sample(range(n), k), in the order Python returns them.
  // REQUIRES: k <= n.
  std::vector<size_t> Sample(size_t n, size_t k);

 private:
  std::array<uint32_t, 624> mt_;
  int index_ = 624;
};

}  // namespace hilnas

#endif  // HILNAS_UTIL_PY_RANDOM_H_
