// GoogleTest matchers for absl::Status and absl::StatusOr<T>; Debian's Abseil
// has no status_matchers.h. Tests check the specific error, never only "not OK":
//   EXPECT_THAT(Load(path), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
#ifndef HILNAS_UTIL_STATUS_MATCHERS_H_
#define HILNAS_UTIL_STATUS_MATCHERS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace hilnas::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s;
  return s.ok();
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + std::string(absl::StatusCodeToString(code)) + " and a matching message") {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code && ::testing::Matches(::testing::Matcher<const std::string&>(
                                 message_matcher))(std::string(s.message()));
}

}  // namespace hilnas::testing

// Tests: ASSERT_OK_AND_ASSIGN(auto x, Foo());
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL_(HILNAS_TEST_CONCAT_(hilnas_sor_, __LINE__), lhs, expr)
#define HILNAS_TEST_CONCAT_INNER_(a, b) a##b
#define HILNAS_TEST_CONCAT_(a, b) HILNAS_TEST_CONCAT_INNER_(a, b)
#define ASSERT_OK_AND_ASSIGN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  ASSERT_TRUE(tmp.ok()) << tmp.status();           \
  lhs = std::move(tmp).value()

#define ASSERT_OK(expr) ASSERT_THAT((expr), ::hilnas::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT((expr), ::hilnas::testing::IsOk())

#endif  // HILNAS_UTIL_STATUS_MATCHERS_H_
