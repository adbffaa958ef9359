#include "util/textproto.h"

#include <cstdio>
#include <string>

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

}  // namespace
}  // namespace hilnas
