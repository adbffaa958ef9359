#include "util/secrets.h"

#include <gtest/gtest.h>

#include <set>

namespace hilnas {
namespace {

TEST(SecretsTest, RandomHexHasTheAskedLengthAndDoesNotRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string s = RandomHex(32);
    ASSERT_EQ(s.size(), 64u);
    EXPECT_EQ(s.find_first_not_of("0123456789abcdef"), std::string::npos);
    EXPECT_TRUE(seen.insert(s).second);
  }
}

TEST(SecretsTest, Sha256HexMatchesTheStandardTestVector) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(SecretsTest, SecretEqualsComparesWholeValues) {
  EXPECT_TRUE(SecretEquals("token-1", "token-1"));
  EXPECT_FALSE(SecretEquals("token-1", "token-2"));
  EXPECT_FALSE(SecretEquals("token-1", "token-1x"));
  EXPECT_FALSE(SecretEquals("", "x"));
  EXPECT_TRUE(SecretEquals("", ""));
}

}  // namespace
}  // namespace hilnas
