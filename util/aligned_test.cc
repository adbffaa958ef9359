#include "util/aligned.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace hilnas {
namespace {

template <typename T>
bool OnACacheLine(const AlignedVector<T>& v) {
  return reinterpret_cast<std::uintptr_t>(v.data()) % kCacheLine == 0;
}

// Every size a kernel's scratch grows through, with other allocations of
// odd sizes in between (which can leave malloc's next block off a line).
TEST(AlignedVectorTest, DataStartsOnACacheLineAtEverySizeAndAfterGrowing) {
  AlignedVector<float> f;
  AlignedVector<uint8_t> b;
  AlignedVector<int32_t> i;
  for (size_t n = 1; n <= 5000; n = n * 3 / 2 + 1) {
    auto* odd = new char[n % 61 + 1];
    f.resize(n);
    b.resize(n);
    i.resize(n);
    delete[] odd;
    ASSERT_TRUE(OnACacheLine(f)) << n;
    ASSERT_TRUE(OnACacheLine(b)) << n;
    ASSERT_TRUE(OnACacheLine(i)) << n;
    AlignedVector<float> fresh(n, 1.0f);
    ASSERT_TRUE(OnACacheLine(fresh)) << n;
    EXPECT_EQ(fresh[n - 1], 1.0f);
  }
}

TEST(AlignedVectorTest, AnImpossibleSizeThrowsInsteadOfWrapping) {
  AlignedAllocator<float> a;
  EXPECT_THROW(a.allocate(static_cast<size_t>(-1) / 2), std::bad_array_new_length);
}

}  // namespace
}  // namespace hilnas
