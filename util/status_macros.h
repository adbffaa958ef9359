// Status propagation macros. Debian's Abseil (20220623) ships no
// status_macros.h, so hilnas defines its own once, here.
#ifndef HILNAS_UTIL_STATUS_MACROS_H_
#define HILNAS_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HILNAS_CONCAT_INNER_(a, b) a##b
#define HILNAS_CONCAT_(a, b) HILNAS_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define HILNAS_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status hilnas_status_ = (expr);          \
    if (!hilnas_status_.ok()) return hilnas_status_; \
  } while (0)

// HILNAS_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>);
// on error returns its status, otherwise moves the value into `lhs`, which
// may be a declaration (`auto x`) or an existing lvalue.
#define HILNAS_ASSIGN_OR_RETURN(lhs, expr) \
  HILNAS_ASSIGN_OR_RETURN_IMPL_(HILNAS_CONCAT_(hilnas_statusor_, __LINE__), lhs, expr)

#define HILNAS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#endif  // HILNAS_UTIL_STATUS_MACROS_H_
