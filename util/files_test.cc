#include "util/files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"

namespace hilnas {
namespace {

TEST(FilesTest, PathWithinComparesWholeComponents) {
  EXPECT_TRUE(PathWithin("/data", "/data"));
  EXPECT_TRUE(PathWithin("/data/a/b", "/data"));
  EXPECT_TRUE(PathWithin("/data/a", "/data/"));
  EXPECT_TRUE(PathWithin("/anything", "/"));
  EXPECT_FALSE(PathWithin("/data2", "/data"));
  EXPECT_FALSE(PathWithin("/da", "/data"));
  EXPECT_FALSE(PathWithin("/data", "/data/a"));
}

TEST(FilesTest, TempPathBesideIsUniqueToEachCall) {
  const std::string a = TempPathBeside("/w/config.json"), b = TempPathBeside("/w/config.json");
  EXPECT_NE(a, b);
  EXPECT_EQ(a.rfind(absl::StrCat("/w/config.json.tmp-", getpid(), "-"), 0), 0u) << a;
}

TEST(FilesTest, CheckRegularFileNamesWhatIsThereInstead) {
  const std::string dir = ::testing::TempDir() + "/files_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_EQ(CheckRegularFile(dir + "/none").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(CheckRegularFile(dir).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  EXPECT_NE(CheckRegularFile(dir + "/fifo").message().find("is a FIFO"), absl::string_view::npos);
}

}  // namespace
}  // namespace hilnas
