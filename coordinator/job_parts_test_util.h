// A fresh SQLite file with the job schema, for the tests of each part of
// the coordinator's benchmarking state (agent registry, job queue, leases,
// drift log), which take the store and the clock injected.
#ifndef HILNAS_COORDINATOR_JOB_PARTS_TEST_UTIL_H_
#define HILNAS_COORDINATOR_JOB_PARTS_TEST_UTIL_H_

#include <filesystem>
#include <memory>
#include <string>

#include "coordinator/job_schema.h"
#include "coordinator/sqlite.h"
#include "gtest/gtest.h"

namespace hilnas {

inline std::unique_ptr<SqliteDb> FreshJobDb() {
  const std::string path = ::testing::TempDir() + "/" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                           ".parts.db";
  std::filesystem::remove(path);
  auto db = SqliteDb::Open(path);
  EXPECT_TRUE(db.ok()) << db.status();
  if (!db.ok()) return nullptr;
  EXPECT_TRUE(CreateJobSchema(**db).ok());
  return *std::move(db);
}

inline DeviceIdentity Device(const std::string& name, const std::string& pool = "") {
  DeviceIdentity d;
  d.set_name(name);
  if (!pool.empty()) d.add_pools(pool);
  return d;
}

inline BenchmarkRequest Request(int prompt = 256) {
  BenchmarkRequest r;
  r.set_checkpoint_dir("/ckpt");
  r.add_prompt_lengths(prompt);
  return r;
}

}  // namespace hilnas

#endif  // HILNAS_COORDINATOR_JOB_PARTS_TEST_UTIL_H_
