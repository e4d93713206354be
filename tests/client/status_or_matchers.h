#pragma once

// IsOkAndHolds(matcher) for absl::StatusOr<T>, with Abseil's name and
// semantics; tests/status_matchers.h has IsOk and StatusIs only.

#include "gmock/gmock.h"

namespace gpumux::client_testing {

MATCHER_P(IsOkAndHolds, value_matcher, "is OK and holds a matching value") {
  if (!arg.ok()) {
    *result_listener << "status is " << arg.status();
    return false;
  }
  return ::testing::ExplainMatchResult(value_matcher, *arg, result_listener);
}

}  // namespace gpumux::client_testing
