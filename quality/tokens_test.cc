#include "quality/tokens.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/npy.h"
#include "util/status_matchers.h"
#include "util/textproto.h"

namespace hilnas {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

fs::path TempDir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / name;
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

TEST(TokenFileTest, RoundTripsUint16AndUint32) {
  const fs::path d = TempDir("hilnas_tokens_rt");
  const std::vector<int32_t> ids = {0, 1, 255, 65535, 7};
  ASSERT_OK(WriteTokenFile((d / "a.bin").string(), ids));
  EXPECT_EQ(fs::file_size(d / "a.bin"), 10u);
  ASSERT_OK_AND_ASSIGN(auto back, ReadTokenFile((d / "a.bin").string()));
  EXPECT_EQ(back, ids);
  const std::vector<int32_t> big = {70000, 3};
  EXPECT_THAT(WriteTokenFile((d / "b.bin").string(), big).message(), HasSubstr("*.u32"));
  ASSERT_OK(WriteTokenFile((d / "b.u32").string(), big));
  EXPECT_EQ(fs::file_size(d / "b.u32"), 8u);
  ASSERT_OK_AND_ASSIGN(back, ReadTokenFile((d / "b.u32").string()));
  EXPECT_EQ(back, big);
  fs::remove_all(d);
}

TEST(TokenFileTest, TruncatedFilesAndOutOfVocabularyIdsAreNamed) {
  const fs::path d = TempDir("hilnas_tokens_bad");
  const std::string odd = (d / "odd.bin").string();
  ASSERT_OK(WriteFileAtomically(odd, std::string("\x01\x00\x02", 3)));
  EXPECT_THAT(ReadTokenFile(odd),
              testing::StatusIs(absl::StatusCode::kDataLoss, HasSubstr("odd.bin: 3 bytes")));
  const std::string ok = (d / "ok.bin").string();
  ASSERT_OK(WriteTokenFile(ok, {1, 2, 300}));
  EXPECT_THAT(ReadTokenFile(ok, 256).status().message(),
              HasSubstr("id 300 at position 2 is outside vocabulary 256"));
  fs::remove_all(d);
}

std::string LittleEndian(const std::vector<int64_t>& values, int width) {
  std::string s;
  for (int64_t v : values) {
    for (int b = 0; b < width; ++b)
      s += static_cast<char>((static_cast<uint64_t>(v) >> (8 * b)) & 0xff);
  }
  return s;
}

TEST(TokenFileTest, ReadsNumpyArraysOfEveryIdTypeAndNamesBadOnes) {
  const fs::path d = TempDir("hilnas_tokens_npy");
  auto read = [&](const std::string& name, const std::string& bytes, int64_t vocab) {
    EXPECT_OK(WriteFileAtomically((d / name).string(), bytes));
    return ReadTokenFile((d / name).string(), vocab);
  };
  const std::vector<int32_t> want = {5, 0, 255, 17};
  for (const auto& [descr, width] :
       std::vector<std::pair<std::string, int>>{{"<u2", 2}, {"<u4", 4}, {"<i4", 4}, {"<i8", 8}}) {
    ASSERT_OK_AND_ASSIGN(
        auto ids,
        read("a.npy", NpyBytes(descr, "(4,)", LittleEndian({5, 0, 255, 17}, width)), 256));
    EXPECT_EQ(ids, want) << descr;
  }
  // Two dimensions flatten in C order.
  ASSERT_OK_AND_ASSIGN(
      auto flat, read("m.npy", NpyBytes("<u2", "(2, 2)", LittleEndian({5, 0, 255, 17}, 2)), 0));
  EXPECT_EQ(flat, want);
  EXPECT_THAT(
      read("neg.npy", NpyBytes("<i8", "(3,)", LittleEndian({1, -4, 2}, 8)), 256).status().message(),
      HasSubstr("neg.npy: id -4 at position 1"));
  EXPECT_THAT(
      read("big.npy", NpyBytes("<u4", "(2,)", LittleEndian({1, 9000}, 4)), 256).status().message(),
      HasSubstr("id 9000 at position 1 is outside vocabulary 256"));
  EXPECT_THAT(read("f.npy", NpyBytes("<f4", "(1,)", LittleEndian({0}, 4)), 0).status().message(),
              HasSubstr("'<f4' is not uint16"));
  EXPECT_THAT(read("short.npy", NpyBytes("<u2", "(4,)", LittleEndian({1, 2, 3}, 2)), 0),
              testing::StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
  EXPECT_THAT(read("text.npy", "not numpy at all", 0),
              testing::StatusIs(absl::StatusCode::kDataLoss, HasSubstr("not a .npy file")));
  fs::remove_all(d);
}

TEST(SplitTokensTest, HoldsOutTheTail) {
  std::vector<int32_t> ids(100);
  for (int i = 0; i < 100; ++i) ids[i] = i;
  ASSERT_OK_AND_ASSIGN(TokenSplit s, SplitTokens(ids, 0.1, 5));
  EXPECT_EQ(s.train.size(), 90u);
  EXPECT_EQ(s.heldout.front(), 90);
  EXPECT_THAT(SplitTokens(ids, 0.1, 20).status().message(), HasSubstr("under 20 tokens"));
  EXPECT_FALSE(SplitTokens(ids, 1.5, 1).ok());
}

TEST(ByteCorpusTest, ConcatenatesTextFilesInSortedOrderSkippingIndexes) {
  const fs::path d = TempDir("hilnas_corpus");
  ASSERT_OK(WriteFileAtomically((d / "b").string(), "Hi"));
  ASSERT_OK(WriteFileAtomically((d / "a").string(), "Yo"));
  ASSERT_OK(WriteFileAtomically((d / "a.dat").string(), "\x01\x02"));
  CorpusManifest m;
  ASSERT_OK_AND_ASSIGN(auto ids, BuildByteCorpus({d.string()}, &m));
  EXPECT_EQ(ids, (std::vector<int32_t>{'Y', 'o', '\n', '\n', 'H', 'i', '\n', '\n'}));
  EXPECT_EQ(m.files.size(), 2u);
  EXPECT_EQ(m.tokens, 8);
  EXPECT_THAT(BuildByteCorpus({(d / "missing").string()}, nullptr).status().message(),
              HasSubstr("does not exist"));
  fs::remove_all(d);
}

}  // namespace
}  // namespace hilnas
