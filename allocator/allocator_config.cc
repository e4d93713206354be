#include "allocator/allocator_config.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpumux {
namespace {

constexpr uint64_t kMB = 1024 * 1024;
constexpr int kRoundupPowerOfTwoStartLog2 = 20;  // buckets start at 1 MiB

bool IsPowerOf2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }
int Log2Floor(uint64_t v) { return 63 - std::countl_zero(v); }

// AllocatorConfig::lexArgs: ',' ':' '[' ']' are tokens of their own, spaces
// vanish, everything else accumulates into words.
std::vector<std::string> Lex(absl::string_view conf) {
  std::vector<std::string> tokens;
  std::string word;
  for (char c : conf) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      if (!word.empty()) tokens.push_back(std::move(word));
      word.clear();
      tokens.emplace_back(1, c);
    } else if (c != ' ') {
      word.push_back(c);
    }
  }
  if (!word.empty()) tokens.push_back(std::move(word));
  return tokens;
}

// Walks the token list the way PyTorch's parser does, with its error texts.
class ConfParser {
 public:
  explicit ConfParser(absl::string_view conf) : tokens_(Lex(conf)) {}

  absl::StatusOr<AllocatorOptions> Parse() {
    AllocatorOptions options;
    for (i_ = 0; i_ < tokens_.size(); ++i_) {
      const std::string key = tokens_[i_];
      absl::Status status;
      if (key == "max_split_size_mb") {
        status = ParseMegabytes(key, &options.max_split_size);
      } else if (key == "max_non_split_rounding_mb") {
        status = ParseMegabytes(key, &options.max_non_split_rounding_size);
      } else if (key == "garbage_collection_threshold") {
        status = ParseGcThreshold(&options.garbage_collection_threshold);
      } else if (key == "roundup_power2_divisions") {
        status = ParseDivisions(&options.roundup_power2_divisions);
      } else if (key == "expandable_segments") {
        status = ParseBool(key, &options.expandable_segments);
      } else if (key == "compact_segments") {
        status = ParseBool(key, &options.compact_segments);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("Unrecognized CachingAllocator option: ", key));
      }
      if (!status.ok()) return status;
      if (i_ + 1 < tokens_.size()) {
        if (absl::Status s = Expect(++i_, ","); !s.ok()) return s;
      }
    }
    return options;
  }

 private:
  absl::Status Expect(size_t i, absl::string_view token) const {
    if (i < tokens_.size() && tokens_[i] == token) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("Error parsing CachingAllocator::AllocatorConfig settings, expected ", token));
  }

  // The value token after "key:"; advances i_ onto it.
  absl::StatusOr<std::string> Value(absl::string_view key) {
    if (absl::Status s = Expect(++i_, ":"); !s.ok()) return s;
    if (++i_ >= tokens_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("Error, expecting ", key, " value"));
    }
    return tokens_[i_];
  }

  static absl::Status BadNumber(absl::string_view key, absl::string_view text) {
    return absl::InvalidArgumentError(
        absl::StrCat("CachingAllocator option ", key, " has invalid value '", text, "'"));
  }

  // max_split_size_mb / max_non_split_rounding_mb: at least kLargeBuffer.
  absl::Status ParseMegabytes(absl::string_view key, uint64_t* out) {
    absl::StatusOr<std::string> text = Value(key);
    if (!text.ok()) return text.status();
    uint64_t mb = 0;
    if (!absl::SimpleAtoi(*text, &mb)) return BadNumber(key, *text);
    constexpr uint64_t kMinMb = kLargeBuffer / kMB;
    if (mb < kMinMb) {
      return absl::InvalidArgumentError(
          absl::StrCat("CachingAllocator option ", key, " too small, must be >= ", kMinMb));
    }
    mb = std::min(mb, std::numeric_limits<uint64_t>::max() / kMB);
    *out = mb * kMB;
    return absl::OkStatus();
  }

  absl::Status ParseGcThreshold(double* out) {
    absl::StatusOr<std::string> text = Value("garbage_collection_threshold");
    if (!text.ok()) return text.status();
    double value = 0;
    if (!absl::SimpleAtod(*text, &value)) return BadNumber("garbage_collection_threshold", *text);
    if (!(value > 0 && value < 1.0)) {
      return absl::InvalidArgumentError(
          "garbage_collect_threshold is invalid, set it in (0.0, 1.0)");
    }
    *out = value;
    return absl::OkStatus();
  }

  // parseRoundUpPower2Divisions: one value for every bucket, or a list of
  // "<MB power of 2>:<divisions>" and ">:<divisions>" entries.
  absl::Status ParseDivisions(std::array<uint64_t, kRoundupPowerOfTwoIntervals>* divisions) {
    constexpr absl::string_view kKey = "roundup_power2_divisions";
    absl::StatusOr<std::string> text = Value(kKey);
    if (!text.ok()) return text.status();
    if (*text != "[") {
      uint64_t value = 0;
      if (!absl::SimpleAtoi(*text, &value)) return BadNumber(kKey, *text);
      if (!IsPowerOf2(value)) {
        return absl::InvalidArgumentError("For roundups, the divisons has to be power of 2 ");
      }
      divisions->fill(value);
      return absl::OkStatus();
    }
    bool first_value = true;
    size_t last_index = 0;
    while (++i_ < tokens_.size() && tokens_[i_] != "]") {
      const std::string interval = tokens_[i_];
      absl::StatusOr<std::string> value_text = Value(kKey);
      if (!value_text.ok()) return value_text.status();
      uint64_t value = 0;
      if (!absl::SimpleAtoi(*value_text, &value)) return BadNumber(kKey, *value_text);
      if (value != 0 && !IsPowerOf2(value)) {
        return absl::InvalidArgumentError(
            "For roundups, the divisons has to be power of 2 or 0 to disable roundup ");
      }
      if (interval == ">") {
        std::fill(divisions->begin() + last_index, divisions->end(), value);
      } else {
        uint64_t interval_mb = 0;
        if (!absl::SimpleAtoi(interval, &interval_mb)) return BadNumber(kKey, interval);
        if (!IsPowerOf2(interval_mb)) {
          return absl::InvalidArgumentError("For roundups, the intervals have to be power of 2 ");
        }
        size_t index = std::min<size_t>(Log2Floor(interval_mb), divisions->size() - 1);
        if (first_value) {
          std::fill(divisions->begin(), divisions->begin() + index, value);
          first_value = false;
        }
        (*divisions)[index] = value;
        last_index = index;
      }
      if (i_ + 1 >= tokens_.size()) return Expect(i_ + 1, "]");
      if (tokens_[i_ + 1] != "]") {
        if (absl::Status s = Expect(++i_, ","); !s.ok()) return s;
      }
    }
    return Expect(i_, "]");
  }

  // PyTorch's True/False options: exactly "True" or "False".
  absl::Status ParseBool(const std::string& key, bool* value) {
    absl::StatusOr<std::string> text = Value(key);
    if (!text.ok()) return text.status();
    if (*text != "True" && *text != "False") {
      return absl::InvalidArgumentError(
          absl::StrCat("Expected a single True/False argument for ", key));
    }
    *value = *text == "True";
    return absl::OkStatus();
  }

  std::vector<std::string> tokens_;
  size_t i_ = 0;
};

uint64_t DivisionsFor(uint64_t size, const AllocatorOptions& options) {
  int log_size = Log2Floor(size);
  int index = log_size > kRoundupPowerOfTwoStartLog2 ? log_size - kRoundupPowerOfTwoStartLog2 : 0;
  index = std::min(index, kRoundupPowerOfTwoIntervals - 1);
  return options.roundup_power2_divisions[index];
}

}  // namespace

absl::StatusOr<AllocatorOptions> AllocatorOptions::Parse(absl::string_view conf) {
  absl::StatusOr<AllocatorOptions> options = ConfParser(conf).Parse();
  if (options.ok()) {
    options->conf = std::string(conf);
    // Compact mode is gpumux's policy on top of expandable segments.
    if (options->compact_segments) options->expandable_segments = true;
  }
  return options;
}

uint64_t RoundUpPower2NextDivision(uint64_t size, uint64_t divisions) {
  if (size <= 4 || divisions <= 1) return size;
  if (IsPowerOf2(size)) return size;
  uint64_t power2_floor = std::bit_floor(size);
  uint64_t step = power2_floor >> Log2Floor(divisions);
  if (step == 0) return power2_floor << 1;
  uint64_t floor = size & ~(step - 1);
  return floor == size ? size : floor + step;
}

uint64_t RoundSize(uint64_t size, const AllocatorOptions& options) {
  if (size < kMinBlockSize) return kMinBlockSize;
  uint64_t divisions = DivisionsFor(size, options);
  if (divisions > 1 && size > kMinBlockSize * divisions) {
    return RoundUpPower2NextDivision(size, divisions);
  }
  return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

uint64_t SegmentSizeFor(uint64_t rounded_size) {
  if (rounded_size <= kSmallSize) return kSmallBuffer;
  if (rounded_size < kMinLargeAlloc) return kLargeBuffer;
  return kRoundLarge * ((rounded_size + kRoundLarge - 1) / kRoundLarge);
}

}  // namespace gpumux
