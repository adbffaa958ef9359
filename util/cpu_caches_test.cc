#include "util/cpu_caches.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hilnas {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A /sys/devices/system/cpu of its own under the test's temporary folder.
class SysfsTree {
 public:
  SysfsTree() : root_(std::filesystem::path(::testing::TempDir()) / "cpu_caches_sysfs") {
    std::filesystem::remove_all(root_);
  }
  ~SysfsTree() { std::filesystem::remove_all(root_); }

  void Cache(int cpu, int index, int level, const std::string& type, const std::string& size,
             const std::string& shared) {
    const std::filesystem::path dir =
        root_ / ("cpu" + std::to_string(cpu)) / "cache" / ("index" + std::to_string(index));
    std::filesystem::create_directories(dir);
    Write(dir / "level", std::to_string(level));
    Write(dir / "type", type);
    Write(dir / "size", size);
    if (!shared.empty()) Write(dir / "shared_cpu_list", shared);
  }
  void RemoveSize(int cpu, int index) {
    std::filesystem::remove(root_ / ("cpu" + std::to_string(cpu)) / "cache" /
                            ("index" + std::to_string(index)) / "size");
  }
  std::string root() const { return root_.string(); }

 private:
  static void Write(const std::filesystem::path& p, const std::string& text) {
    std::ofstream(p) << text << "\n";
  }
  std::filesystem::path root_;
};

// A phone-like part: CPUs 0-1 little cores sharing a 256K L2, CPUs 2-3 big
// cores with 1M each, one 8M L3 over all four.
void Phone(SysfsTree& t) {
  for (int cpu = 0; cpu < 4; ++cpu) {
    const bool little = cpu < 2;
    t.Cache(cpu, 0, 1, "Data", little ? "32K" : "64K", std::to_string(cpu));
    t.Cache(cpu, 1, 1, "Instruction", "64K", std::to_string(cpu));
    t.Cache(cpu, 2, 2, "Unified", little ? "256K" : "1024K", little ? "0-1" : std::to_string(cpu));
    t.Cache(cpu, 3, 3, "Unified", "8M", "0-3");
  }
}

TEST(CpuCachesTest, ParsesCpuLists) {
  absl::StatusOr<std::vector<int>> cpus = ParseCpuList("0-3,6");
  ASSERT_TRUE(cpus.ok()) << cpus.status();
  EXPECT_THAT(*cpus, ElementsAre(0, 1, 2, 3, 6));
  for (const char* bad : {"", "3-1", "x", "1-", "-2", "1-2-3", "0-70000", "1,,a", " , "}) {
    EXPECT_FALSE(ParseCpuList(bad).ok()) << bad;
  }
}

// FormatCpuList writes what ParseCpuList reads, runs and single CPUs.
TEST(CpuCachesTest, FormatsCpuListsAsTheyAreParsed) {
  EXPECT_EQ(FormatCpuList({0, 1, 2, 3, 6}), "0-3,6");
  EXPECT_EQ(FormatCpuList({5}), "5");
  EXPECT_EQ(FormatCpuList({0, 2, 4, 5}), "0,2,4-5");
  EXPECT_EQ(FormatCpuList({}), "");
  for (const char* text : {"0-3,6", "1", "0,2,4-5", "7-9,11-12,15"}) {
    absl::StatusOr<std::vector<int>> cpus = ParseCpuList(text);
    ASSERT_TRUE(cpus.ok()) << text;
    EXPECT_EQ(FormatCpuList(*cpus), text);
  }
  const std::vector<int> mine = AffinityCpus();
  EXPECT_FALSE(mine.empty());
  EXPECT_TRUE(std::is_sorted(mine.begin(), mine.end()));
}

TEST(CpuCachesTest, SharesASharedCacheAmongTheProcesssCpus) {
  SysfsTree t;
  Phone(t);
  // The big cores only: each has its own 1M L2, and the L3 is shared by two.
  absl::StatusOr<CpuCaches> big = ReadSysfsCaches(t.root(), {2, 3});
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->l1d, 64 << 10);
  EXPECT_EQ(big->l2, 1 << 20);
  EXPECT_EQ(big->l3, 4 << 20);
  EXPECT_EQ(big->source, "sysfs");
  EXPECT_EQ(big->Describe(), "L1d 64 KiB, L2 1 MiB, L3 4 MiB a thread (sysfs)");
  // All four: the little cores' shared L2 is the smallest share (128K).
  absl::StatusOr<CpuCaches> all = ReadSysfsCaches(t.root(), {0, 1, 2, 3});
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->l1d, 32 << 10);
  EXPECT_EQ(all->l2, 128 << 10);
  EXPECT_EQ(all->l3, 2 << 20);
  // One little core alone has its pair's whole L2.
  absl::StatusOr<CpuCaches> one = ReadSysfsCaches(t.root(), {1});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->l2, 256 << 10);
}

// Some phones' device trees give a cache's level and type but no size:
// that level is unknown, the others are read.
TEST(CpuCachesTest, ACacheWithoutASizeIsUnknown) {
  SysfsTree t;
  t.Cache(0, 0, 1, "Data", "64K", "0");
  t.Cache(0, 1, 2, "Unified", "512K", "0");
  t.Cache(0, 2, 3, "Unified", "4M", "0");
  t.RemoveSize(0, 1);
  absl::StatusOr<CpuCaches> c = ReadSysfsCaches(t.root(), {0});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->l1d, 64 << 10);
  EXPECT_EQ(c->l2, 0);
  EXPECT_EQ(c->l3, 4 << 20);
  EXPECT_EQ(c->Describe(), "L1d 64 KiB, L2 unknown, L3 4 MiB a thread (sysfs)");
}

TEST(CpuCachesTest, MissingTreeIsNotFoundAndBadFilesAreNamed) {
  SysfsTree t;
  EXPECT_TRUE(absl::IsNotFound(ReadSysfsCaches(t.root(), {0}).status()));
  t.Cache(0, 0, 1, "Data", "48 kilobytes", "0");
  absl::Status bad = ReadSysfsCaches(t.root(), {0}).status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad)) << bad;
  EXPECT_THAT(bad.message(), HasSubstr("cpu0/cache/index0/size"));
  t.Cache(0, 0, 1, "Data", "8G", "0");
  EXPECT_THAT(ReadSysfsCaches(t.root(), {0}).status().message(), HasSubstr("1K to 4G"));
  t.Cache(0, 0, 1, "Data", "48K", "0-");
  EXPECT_THAT(ReadSysfsCaches(t.root(), {0}).status().message(), HasSubstr("shared_cpu_list"));
}

TEST(CpuCachesTest, SysconfFillsWhatSysfsLeftUnknown) {
  CpuCaches sysfs, sysconf;
  sysfs.l1d = 64 << 10;
  sysfs.l3 = 4 << 20;
  sysfs.source = "sysfs";
  sysconf.l1d = 32 << 10;
  sysconf.l2 = 1 << 20;
  sysconf.l3 = 32 << 20;
  sysconf.source = "sysconf";
  const CpuCaches merged = MergeCaches(sysfs, sysconf);
  EXPECT_EQ(merged.l1d, 64 << 10);  // sysfs's where it knew
  EXPECT_EQ(merged.l2, 1 << 20);
  EXPECT_EQ(merged.l3, 4 << 20);
  EXPECT_EQ(merged.source, "sysfs, sysconf where it gave no size");
  sysfs.l2 = 512 << 10;
  EXPECT_EQ(MergeCaches(sysfs, sysconf).source, "sysfs");
  const CpuCaches bad =
      MergeCaches(absl::InvalidArgumentError("cpu0/cache/index2/size: bad"), sysconf);
  EXPECT_EQ(bad.l2, 1 << 20);
  EXPECT_THAT(bad.source, HasSubstr("sysfs passed over: cpu0/cache/index2/size"));
  EXPECT_EQ(MergeCaches(absl::NotFoundError("none"), sysconf).source, "sysconf");
}

TEST(CpuCachesTest, HostCachesComeFromSomewhereOrSayUnknown) {
  const CpuCaches c = HostCpuCaches();
  EXPECT_THAT(c.source,
              ::testing::AnyOf(HasSubstr("sysfs"), HasSubstr("sysconf"), HasSubstr("unknown")));
  if (c.source == "unknown") {
    EXPECT_EQ(c.l2, 0);
  }
  EXPECT_EQ(KernelCpuCaches().Describe(), KernelCpuCaches().Describe());
}

}  // namespace
}  // namespace hilnas
