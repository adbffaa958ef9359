#include "util/textproto.h"

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/search_space.pb.h"
#include "util/status_matchers.h"

namespace hilnas {
namespace {

using ::hilnas::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(TextProtoTest, ParsesValidSearchSpace) {
  SearchSpace space;
  ASSERT_OK(ParseTextProto("num_layers { min: 10 max: 16 step: 1 }\nblock_size: 128\n",
                           "space.textproto", &space));
  EXPECT_EQ(space.num_layers().max(), 16);
  EXPECT_EQ(space.block_size(), 128);
}

TEST(TextProtoTest, UnknownFieldNamesFileLineAndField) {
  SearchSpace space;
  EXPECT_THAT(ParseTextProto("block_size: 128\n  d_fnn { min: 1 }\n", "space.textproto", &space),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("space.textproto:2:"), HasSubstr("d_fnn"))));
}

TEST(TextProtoTest, BadEnumValueNamesTheValue) {
  SearchSpace space;
  EXPECT_THAT(
      ParseTextProto("attention_choices: FULL\nattention_choices: LINEAR\n", "s.textproto", &space),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("s.textproto:"), HasSubstr("\"LINEAR\""),
                     HasSubstr("attention_choices"))));
}

TEST(TextProtoTest, MissingFileIsNotFound) {
  SearchSpace space;
  EXPECT_THAT(ReadTextProtoFile("/nonexistent/space.textproto", &space),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("/nonexistent/space.textproto")));
}

TEST(TextProtoTest, WriteThenReadRoundTrips) {
  SearchSpace space;
  space.set_block_size(256);
  space.mutable_d_ffn()->add_values(512);
  const std::string path = ::testing::TempDir() + "/roundtrip.textproto";
  ASSERT_OK(WriteTextProtoFile(path, space));
  SearchSpace back;
  ASSERT_OK(ReadTextProtoFile(path, &back));
  EXPECT_EQ(back.SerializeAsString(), space.SerializeAsString());
  std::remove(path.c_str());
}

// Writers of one file at once (a fleet's agents writing the same
// candidate's config.json into a shared work folder) all succeed, the file
// holds one writer's whole contents, and nothing staged is left behind. A
// shared "path.tmp" failed this: one writer's rename took the other's file.
TEST(TextProtoTest, ConcurrentAtomicWritesOfOnePathAllSucceedWhole) {
  const std::string dir = ::testing::TempDir() + "/atomic_writes";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/config.json";
  std::vector<std::string> contents;
  for (int t = 0; t < 8; ++t) contents.push_back(std::string(4096 + t, static_cast<char>('a' + t)));
  std::atomic<int> failures{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 8; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        if (!WriteFileAtomically(path, contents[t]).ok()) ++failures;
      }
    });
  }
  for (std::thread& w : writers) w.join();
  EXPECT_EQ(failures.load(), 0);
  std::string got;
  ASSERT_OK(ReadFileToString(path, &got));
  EXPECT_THAT(contents, ::testing::Contains(got));
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    ++entries;
    EXPECT_EQ(e.path().filename(), "config.json");
  }
  EXPECT_EQ(entries, 1);
}

}  // namespace
}  // namespace hilnas
