#include "util/db_owner.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

class DbOwnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/db_owner_test";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    db_ = dir_ + "/c.db";
  }
  std::string dir_, db_;
};

TEST_F(DbOwnerTest, ASecondOwnerIsRefusedNamingTheFirstUntilItLetsGo) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DbOwnerLock> first,
                       DbOwnerLock::Acquire(db_, "127.0.0.1:0"));
  ASSERT_OK(first->SetAddress("127.0.0.1:4711"));
  // flock locks belong to open files: a second open in this process
  // conflicts like another process's would.
  absl::StatusOr<std::unique_ptr<DbOwnerLock>> second = DbOwnerLock::Acquire(db_, "x:1");
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string why(second.status().message());
  EXPECT_NE(why.find(absl::StrCat("pid ", getpid())), std::string::npos) << why;
  EXPECT_NE(why.find("listening on 127.0.0.1:4711"), std::string::npos) << why;
  EXPECT_NE(why.find(db_), std::string::npos) << why;
  ASSERT_OK_AND_ASSIGN(std::optional<DbOwnerInfo> owner, DbOwnerLock::Owner(db_));
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->pid, getpid());
  EXPECT_GT(owner->since_unix_ms, 0);
  first.reset();
  ASSERT_OK_AND_ASSIGN(owner, DbOwnerLock::Owner(db_));
  EXPECT_FALSE(owner.has_value());
  EXPECT_OK(DbOwnerLock::Acquire(db_, "x:1").status());
}

TEST_F(DbOwnerTest, AKilledOwnerNeverBlocksTheNext) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto lock = DbOwnerLock::Acquire(db_, "127.0.0.1:9");
    const char c = lock.ok() ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    pause();
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  absl::StatusOr<std::unique_ptr<DbOwnerLock>> refused = DbOwnerLock::Acquire(db_, "x:1");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(absl::StrCat("pid ", child)), absl::string_view::npos)
      << refused.status();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // No stale file to judge: the kernel dropped the lock with the process.
  EXPECT_OK(DbOwnerLock::Acquire(db_, "x:1").status());
  close(ready[0]);
  close(ready[1]);
}

TEST_F(DbOwnerTest, NetworkFilesystemsAreNamedAndLocalOnesPass) {
  EXPECT_EQ(NetworkFilesystemName(0x6969), "NFS");
  EXPECT_EQ(NetworkFilesystemName(0xFF534D42), "CIFS");
  EXPECT_EQ(NetworkFilesystemName(0x65735546), "FUSE");
  EXPECT_EQ(NetworkFilesystemName(0xEF53), "");      // ext4
  EXPECT_EQ(NetworkFilesystemName(0x01021994), "");  // tmpfs
  ASSERT_OK_AND_ASSIGN(std::string fs, NetworkFilesystemOf(dir_));
  EXPECT_EQ(fs, "") << "the test's temporary folder is on " << fs;
  EXPECT_FALSE(NetworkFilesystemOf(dir_ + "/missing").ok());
}

}  // namespace
}  // namespace hilnas
