#pragma once

// IsOk(), StatusIs(code[, message_matcher]) and IsOkAndHolds(value_matcher)
// with Abseil's names and semantics, for absl::Status and absl::StatusOr<T>.

#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace gpumux::testing {

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

MATCHER_P(StatusIs, code, "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, message_matcher, "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(message_matcher, std::string(s.message()), result_listener);
}

// IsOkAndHolds's work for one StatusOr type, as Abseil's.
template <typename StatusOrType>
class IsOkAndHoldsMatcherImpl : public ::testing::MatcherInterface<StatusOrType> {
 public:
  using Value = typename std::remove_cv_t<std::remove_reference_t<StatusOrType>>::value_type;

  template <typename InnerMatcher>
  explicit IsOkAndHoldsMatcherImpl(InnerMatcher&& inner)
      : inner_(::testing::SafeMatcherCast<const Value&>(std::forward<InnerMatcher>(inner))) {}

  void DescribeTo(std::ostream* os) const override {
    *os << "is OK and has a value that ";
    inner_.DescribeTo(os);
  }
  void DescribeNegationTo(std::ostream* os) const override {
    *os << "isn't OK or has a value that ";
    inner_.DescribeNegationTo(os);
  }
  bool MatchAndExplain(StatusOrType actual,
                       ::testing::MatchResultListener* listener) const override {
    if (!actual.ok()) {
      *listener << "which has status " << actual.status();
      return false;
    }
    ::testing::StringMatchResultListener inner_listener;
    const bool matches = inner_.MatchAndExplain(*actual, &inner_listener);
    const std::string explanation = inner_listener.str();
    if (!explanation.empty()) *listener << "which contains a value " << explanation;
    return matches;
  }

 private:
  const ::testing::Matcher<const Value&> inner_;
};

// Converts to a matcher of any StatusOr type whose value `inner` matches.
template <typename InnerMatcher>
class IsOkAndHoldsMatcher {
 public:
  explicit IsOkAndHoldsMatcher(InnerMatcher inner) : inner_(std::move(inner)) {}

  template <typename StatusOrType>
  operator ::testing::Matcher<StatusOrType>() const {  // NOLINT: implicit by design
    return ::testing::Matcher<StatusOrType>(
        new IsOkAndHoldsMatcherImpl<const StatusOrType&>(inner_));
  }

 private:
  const InnerMatcher inner_;
};

// Matches an OK absl::StatusOr<T> whose value matches `inner` (a matcher or a
// value to compare with ==).
template <typename InnerMatcher>
IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>> IsOkAndHolds(InnerMatcher&& inner) {
  return IsOkAndHoldsMatcher<std::decay_t<InnerMatcher>>(std::forward<InnerMatcher>(inner));
}

}  // namespace gpumux::testing

#define ASSERT_OK(expr) ASSERT_THAT(expr, ::gpumux::testing::IsOk())
#define EXPECT_OK(expr) EXPECT_THAT(expr, ::gpumux::testing::IsOk())
