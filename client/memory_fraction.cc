#include "client/memory_fraction.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace gpumux {

absl::Status ValidateMemoryFraction(double fraction) {
  if (fraction >= 0.0 && fraction <= 1.0) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("Invalid fraction value: ", PythonFloatRepr(fraction), ". Allowed range: 0~1"));
}

std::string PythonFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  // Shortest round-trip digits in scientific form, e.g. "-1.2345e+17".
  char buffer[64];
  auto [end, error] =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  (void)error;  // 64 bytes hold any double.
  std::string text(buffer, end);
  std::string sign;
  if (text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  const size_t e = text.find('e');
  std::string digits = text.substr(0, e);
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  const int exponent = std::atoi(text.c_str() + e + 1);

  if (exponent >= 16 || exponent < -4) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&mantissa, ".", digits.substr(1));
    const int magnitude = std::abs(exponent);
    return absl::StrCat(sign, mantissa, "e", exponent < 0 ? "-" : "+", magnitude < 10 ? "0" : "",
                        magnitude);
  }
  if (exponent < 0) return absl::StrCat(sign, "0.", std::string(-exponent - 1, '0'), digits);
  const size_t integer_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= integer_digits) {
    digits.append(integer_digits - digits.size(), '0');
    return absl::StrCat(sign, digits, ".0");
  }
  return absl::StrCat(sign, digits.substr(0, integer_digits), ".", digits.substr(integer_digits));
}

}  // namespace gpumux
