#pragma once

// GPUMUX_RETURN_IF_ERROR / GPUMUX_ASSIGN_OR_RETURN: Abseil's (unreleased in
// Debian's 20220623) status macros, with the same names and semantics.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define GPUMUX_STATUS_CONCAT_INNER_(a, b) a##b
#define GPUMUX_STATUS_CONCAT_(a, b) GPUMUX_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function
// when it is not OK.
#define GPUMUX_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::absl::Status gpumux_status_ = (expr);          \
    if (!gpumux_status_.ok()) return gpumux_status_; \
  } while (false)

// GPUMUX_ASSIGN_OR_RETURN(auto x, Foo()): evaluates Foo() (an absl::StatusOr);
// returns its status when not OK, otherwise moves the value into `lhs`.
#define GPUMUX_ASSIGN_OR_RETURN(lhs, expr) \
  GPUMUX_ASSIGN_OR_RETURN_IMPL_(GPUMUX_STATUS_CONCAT_(gpumux_statusor_, __LINE__), lhs, expr)

#define GPUMUX_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()
